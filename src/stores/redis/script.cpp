#include "stores/redis/script.hpp"

namespace dlock::redis {

namespace {

std::vector<std::string> build(std::string_view command, std::string_view first,
                               const std::vector<std::string>& keys,
                               const std::vector<std::string>& args)
{
  std::vector<std::string> argv;
  argv.reserve(3 + keys.size() + args.size());
  argv.emplace_back(command);
  argv.emplace_back(first);
  argv.push_back(std::to_string(keys.size()));
  argv.insert(argv.end(), keys.begin(), keys.end());
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

} // namespace

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
  return reply.type == REDIS_REPLY_ERROR
         && std::string_view(reply.str, reply.len).substr(0, 8) == "NOSCRIPT";
}

} // namespace dlock::redis
