#include "redis/script.hpp"

#include "util/sha1.hpp"

namespace dlock::redis {

namespace {

std::vector<std::string> build(std::string command, std::string first,
                               const std::vector<std::string>& keys,
                               const std::vector<std::string>& args)
{
  std::vector<std::string> argv;
  argv.reserve(3 + keys.size() + args.size());
  argv.push_back(std::move(command));
  argv.push_back(std::move(first));
  argv.push_back(std::to_string(keys.size()));
  argv.insert(argv.end(), keys.begin(), keys.end());
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

} // namespace

Script::Script(std::string source) : m_source(std::move(source)), m_sha(util::sha1_hex(m_source)) {}

std::vector<std::string> Script::evalsha(const std::vector<std::string>& keys,
                                         const std::vector<std::string>& args) const
{
  return build("EVALSHA", m_sha, keys, args);
}

std::vector<std::string> Script::eval(const std::vector<std::string>& keys,
                                      const std::vector<std::string>& args) const
{
  return build("EVAL", m_source, keys, args);
}

Reply Script::run(Connection& connection, const std::vector<std::string>& keys,
                  const std::vector<std::string>& args, util::TimePoint deadline) const
{
  Reply reply = connection.call(evalsha(keys, args), deadline);
  if (is_noscript(*reply)) {
    reply = connection.call(eval(keys, args), deadline);
  }
  return reply;
}

bool is_noscript(const redisReply& reply)
{
  return reply.type == REDIS_REPLY_ERROR && std::string_view(reply.str, reply.len).substr(0, 8) == "NOSCRIPT";
}

} // namespace dlock::redis
