#include "redis/reply.hpp"

#include <array>

namespace dlock::redis {

namespace {

bool starts_with_word(std::string_view message, std::string_view word)
{
  return message.substr(0, word.size()) == word
         && (message.size() == word.size() || message[word.size()] == ' ');
}

} // namespace

ExitCode classify_error(std::string_view message)
{
  // Scripts wrap errors ("ERR Error running script ... NOPERM ..."), so look past the prefix too.
  static constexpr std::array<std::string_view, 3> auth_codes = {"NOAUTH", "WRONGPASS", "NOPERM"};
  static constexpr std::array<std::string_view, 6> unavailable_codes = {
    "LOADING", "READONLY", "MASTERDOWN", "BUSY", "CLUSTERDOWN", "TRYAGAIN"};
  for (auto code : auth_codes) {
    if (starts_with_word(message, code) || message.find(std::string(code) + " ") != std::string_view::npos) {
      return ExitCode::auth;
    }
  }
  // Older servers word these without an error code; Redis 7.0 reports a command denied inside
  // a script as a plain ERR (Valkey 8 as "ACL failure in script"); and before AUTH, Redis refuses requests of more than 10 arguments
  // as a protocol error.
  static constexpr std::array<std::string_view, 6> auth_phrases = {
    "invalid password", "AUTH <password> called without any password configured",
    "invalid username-password pair", "can't run this command or subcommand",
    "unauthenticated multibulk", "ACL failure in script"};
  for (auto phrase : auth_phrases) {
    if (message.find(phrase) != std::string_view::npos) {
      return ExitCode::auth;
    }
  }
  for (auto code : unavailable_codes) {
    if (starts_with_word(message, code)) {
      return ExitCode::unavailable;
    }
  }
  return ExitCode::internal;
}

void throw_if_error(const redisReply& reply, std::string_view what)
{
  if (reply.type == REDIS_REPLY_ERROR) {
    std::string_view message(reply.str, reply.len);
    throw Error(classify_error(message), "{}: {}", what, message);
  }
}

std::string describe(const redisReply& reply)
{
  switch (reply.type) {
  case REDIS_REPLY_STRING:
    return fmt::format("string \"{}\"", std::string_view(reply.str, reply.len).substr(0, 80));
  case REDIS_REPLY_STATUS:
    return fmt::format("status {}", std::string_view(reply.str, reply.len));
  case REDIS_REPLY_ERROR:
    return fmt::format("error {}", std::string_view(reply.str, reply.len));
  case REDIS_REPLY_INTEGER:
    return fmt::format("integer {}", reply.integer);
  case REDIS_REPLY_NIL:
    return "nil";
  case REDIS_REPLY_ARRAY:
    return fmt::format("array of {}", reply.elements);
  default:
    return fmt::format("reply of type {}", reply.type);
  }
}

long long expect_integer(const redisReply& reply, std::string_view what)
{
  throw_if_error(reply, what);
  if (reply.type != REDIS_REPLY_INTEGER) {
    throw Error(ExitCode::internal, "{}: unexpected reply ({})", what, describe(reply));
  }
  return reply.integer;
}

} // namespace dlock::redis
