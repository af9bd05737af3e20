#include "stores/redis/reply.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <span>
#include <vector>

namespace dlock::redis {

namespace {

// Whether message carries an error code such as NOPERM or OOM: at its start, or past a script
// wrapper ("ERR Error running script ...: @user_script: 9: NOPERM ...", "...: -OOM ..." in
// Redis 6), where the code follows a space or the "-" of the error it wraps.
bool has_code(std::string_view message, std::string_view code)
{
  for (std::size_t at = message.find(code); at != std::string_view::npos;
       at = message.find(code, at + 1)) {
    bool starts = at == 0 || message[at - 1] == ' ' || message[at - 1] == '-';
    bool ends = at + code.size() == message.size() || message[at + code.size()] == ' ';
    if (starts && ends) {
      return true;
    }
  }
  return false;
}

bool has_phrase(std::string_view message, std::span<const std::string_view> phrases)
{
  return std::any_of(phrases.begin(), phrases.end(), [&](std::string_view phrase) {
    return message.find(phrase) != std::string_view::npos;
  });
}

bool has_any_code(std::string_view message, std::span<const std::string_view> codes)
{
  return std::any_of(codes.begin(), codes.end(),
                     [&](std::string_view code) { return has_code(message, code); });
}

} // namespace

bool asks_for_password(std::string_view message)
{
  // Before AUTH, Redis refuses a request of more than 10 arguments (or a long argument) as a
  // protocol error instead of NOAUTH.
  static constexpr std::array<std::string_view, 3> phrases = {
    "unauthenticated multibulk", "unauthenticated bulk", "Authentication required"};
  return has_code(message, "NOAUTH") || has_phrase(message, phrases);
}

ExitCode classify_error(std::string_view message)
{
  static constexpr std::array<std::string_view, 2> auth_codes = {"WRONGPASS", "NOPERM"};
  // Older servers word these without an error code; Redis 7.0 reports a command denied inside
  // a script as a plain ERR (Valkey 8 as "ACL failure in script").
  static constexpr std::array<std::string_view, 5> auth_phrases = {
    "invalid password", "AUTH <password> called without any password configured",
    "invalid username-password pair", "can't run this command or subcommand",
    "ACL failure in script"};
  static constexpr std::array<std::string_view, 7> unavailable_codes = {
    "LOADING", "READONLY", "MASTERDOWN", "BUSY", "CLUSTERDOWN", "TRYAGAIN", "OOM"};
  if (asks_for_password(message) || has_any_code(message, auth_codes)
      || has_phrase(message, auth_phrases)) {
    return ExitCode::auth;
  }
  if (has_any_code(message, unavailable_codes)) {
    return ExitCode::unavailable;
  }
  return ExitCode::internal;
}

bool is_not_master(const redisReply& reply)
{
  static constexpr std::array<std::string_view, 2> codes = {"READONLY", "MASTERDOWN"};
  return reply.type == REDIS_REPLY_ERROR
         && has_any_code(std::string_view(reply.str, reply.len), codes);
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

lock::HolderInfo holder_from_hash(const redisReply& reply)
{
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements == 0) {
    return {};
  }
  std::vector<lock::HolderField> fields;
  for (std::size_t i = 0; i + 1 < reply.elements; i += 2) {
    const redisReply* field = reply.element[i];
    const redisReply* value = reply.element[i + 1];
    if (field->type != REDIS_REPLY_STRING || value->type != REDIS_REPLY_STRING) {
      return lock::HolderInfo::not_dlock();
    }
    std::string_view name(field->str, field->len);
    if (name == "not_dlock") { // the script found a record dlock did not write (see prelude.lua)
      return lock::HolderInfo::not_dlock();
    }
    fields.push_back({name, std::string_view(value->str, value->len)});
  }
  return lock::parse_holder_record(fields).value_or(lock::HolderInfo::not_dlock());
}

} // namespace dlock::redis
