#include "cli/validation.hpp"

#include "lock/holder.hpp"
#include "util/duration.hpp"
#include "util/error.hpp"
#include "util/files.hpp"
#include "util/text.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <string_view>

namespace dlock::cli {

namespace {

// The value of an option the subcommand needs. CLI11's required() is not used: it is checked
// before unknown options are, and "--key is required" would hide a mistyped option.
template<typename Value>
const Value& required(const std::optional<Value>& value, std::string_view name)
{
  if (!value) {
    throw Error(ExitCode::usage, "{} is required", name);
  }
  return *value;
}

// A duration that must be more than nothing (timeouts, --max-hold, --expire): the one home of
// "OPTION must be greater than zero".
util::Millis positive_duration(const std::string& text, std::string_view option)
{
  util::Millis duration = util::parse_duration(text, option);
  if (duration.count() <= 0) {
    throw Error(ExitCode::usage, "{} must be greater than zero", option);
  }
  return duration;
}

// A duration option that may be left out (then nullopt), zero included.
std::optional<util::Millis> optional_duration(const std::optional<std::string>& text,
                                              std::string_view option)
{
  if (!text) {
    return std::nullopt;
  }
  return util::parse_duration(*text, option);
}

// status's KEY: given, and a valid lock name.
lock::LockName resolve_key(const Arguments& args, std::string_view name)
{
  return lock::LockName::parse(required(args.key, name));
}

// -k KEY, one or more: valid lock names, in canonical order.
std::vector<lock::LockName> resolve_keys(const Arguments& args)
{
  if (args.keys.empty()) {
    throw Error(ExitCode::usage, "--key is required");
  }
  std::vector<lock::LockName> keys;
  for (const std::string& key : args.keys) {
    keys.push_back(lock::LockName::parse(key));
  }
  return lock::canonical_order(std::move(keys));
}

// -k KEY, exactly once, for the subcommands that coordinate on one name.
lock::LockName resolve_one_key(const Arguments& args, std::string_view subcommand)
{
  if (args.keys.size() > 1) {
    throw Error(ExitCode::usage, "{} takes one --key (got {})", subcommand, args.keys.size());
  }
  return resolve_keys(args).front();
}

// acquire --keep --on-lost signal:NAME (TERM, SIGTERM, or a number).
int parse_on_lost_signal(const std::string& text)
{
  constexpr std::string_view prefix = "signal:";
  std::string_view name = text;
  if (!name.starts_with(prefix)) {
    throw Error(ExitCode::usage, "--on-lost takes signal:NAME, e.g. signal:TERM (got '{}')", text);
  }
  name.remove_prefix(prefix.size());
  if (name.starts_with("SIG")) {
    name.remove_prefix(3);
  }
  for (int sig = 1; sig < NSIG; ++sig) {
    const char* abbrev = ::sigabbrev_np(sig);
    if (abbrev != nullptr && name == abbrev) {
      return sig;
    }
  }
  int number = 0;
  auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), number);
  if (error == std::errc() && end == name.data() + name.size() && number > 0 && number < NSIG) {
    return number;
  }
  throw Error(ExitCode::usage, "--on-lost: unknown signal '{}'", text);
}

// --limit N and -s: the kind of lock, for run and acquire.
lock::LockKind resolve_kind(const Arguments& args)
{
  if (args.shared && args.limit && *args.limit != 1) {
    throw Error(ExitCode::usage, "--shared and --limit cannot be used together");
  }
  lock::LockKind kind =
    args.shared ? lock::LockKind::shared() : lock::LockKind::semaphore(args.limit.value_or(1));
  if (kind.has_slots() && args.fair) {
    throw Error(ExitCode::usage, "--fair works with the exclusive lock only, not with {}",
                args.shared ? "--shared" : "--limit");
  }
  return kind;
}

// --token T, else DLOCK_TOKEN, not empty; alternative names what else the subcommand accepts.
// DLOCK_TOKEN is read here rather than by CLI11, for which it would count as a --token given
// on the command line, clashing with release --force in a job that has it in its environment.
std::string resolve_token(const Arguments& args, std::string_view subcommand,
                          std::string_view alternative = "")
{
  const char* env = std::getenv("DLOCK_TOKEN");
  std::string token = args.token ? *args.token : env != nullptr ? env : "";
  if (token.empty()) {
    throw Error(ExitCode::usage, "{} needs --token T (or DLOCK_TOKEN){}", subcommand, alternative);
  }
  return token;
}

// --ttl D, at least 1s: the same floor for run, acquire and renew.
util::Millis parse_ttl(const std::string& text)
{
  util::Millis ttl = util::parse_duration(text, "--ttl");
  if (ttl < std::chrono::seconds(1)) {
    throw Error(ExitCode::usage, "--ttl must be at least 1s (got {})", text);
  }
  return ttl;
}

// --wait-replicas N and --wait-replicas-timeout D (default ttl/10), shared by run, acquire and
// renew.
lock::ReplicaAck resolve_replicas(const Arguments& args, util::Millis ttl)
{
  lock::ReplicaAck ack;
  ack.replicas = args.wait_replicas;
  if (args.wait_replicas_timeout) {
    if (ack.replicas == 0) {
      throw Error(ExitCode::usage, "--wait-replicas-timeout needs --wait-replicas N");
    }
    ack.timeout = positive_duration(*args.wait_replicas_timeout, "--wait-replicas-timeout");
  } else if (ack.replicas > 0) {
    ack.timeout = ttl / 10;
  }
  return ack;
}

// How to take the lock, shared by run and acquire (only acquire requires --ttl). The replicas
// are resolved by each, since run checks its command first: which of two mistakes is reported
// stays as it was.
// A lock kept at least min_hold cannot be given back after max_hold: one would have to give.
void refuse_min_hold_past(util::Millis min_hold, util::Millis max_hold)
{
  if (max_hold < min_hold) {
    throw Error(ExitCode::usage, "--min-hold {} is longer than --max-hold {}",
                util::format_duration(min_hold), util::format_duration(max_hold));
  }
}

// --note TEXT: at most lock::max_note_chars characters, each printable as it is (no control,
// invisible or invalid UTF-8 character, which status would have to escape).
std::string resolve_note(const std::string& note)
{
  if (util::printable(note) != note) {
    throw Error(ExitCode::usage, "--note must be printable text (got {})", util::printable(note));
  }
  if (util::utf8_prefix_chars(note, lock::max_note_chars).size() != note.size()) {
    throw Error(ExitCode::usage, "--note is longer than {} characters", lock::max_note_chars);
  }
  return note;
}

// --metrics-dir DIR: a directory that exists and that dlock may write, checked before the run
// (no lock taken, the command not run) rather than found out at its end. It is not created: a
// directory root makes in a place others write is theirs to swap, and a typo would go unseen.
std::string resolve_metrics_dir(const std::string& dir)
{
  if (dir.empty()) {
    throw Error(ExitCode::usage, "--metrics-dir names no directory");
  }
  util::UniqueFd fd = util::open_directory(dir);
  if (!fd || ::faccessat(fd.get(), ".", W_OK | X_OK, AT_EACCESS) != 0) {
    int error = errno;
    throw Error(ExitCode::config, "--metrics-dir '{}': {}", util::printable(dir),
                error == ENOENT    ? "no such directory (dlock does not create it)"
                : error == ENOTDIR ? "not a directory"
                : fd               ? fmt::format("cannot be written ({})", std::strerror(error))
                                   : std::string(std::strerror(error)));
  }
  return dir;
}

commands::LockRequestOptions resolve_lock_request(const Arguments& args, bool ttl_required)
{
  commands::LockRequestOptions request{.keys = resolve_keys(args), .kind = resolve_kind(args)};
  if (args.ttl || ttl_required) {
    request.ttl = parse_ttl(required(args.ttl, "--ttl"));
    request.ttl_given = true;
  }
  if (args.fair && args.no_wait) {
    throw Error(ExitCode::usage, "--fair and --no-wait cannot be used together");
  }
  if (args.wait && args.no_wait) {
    throw Error(ExitCode::usage, "--wait and --no-wait cannot be used together");
  }
  request.wait = optional_duration(args.wait, "--wait");
  request.no_wait = args.no_wait;
  request.fair = args.fair;
  request.conflict_exit_code = args.conflict_exit_code;
  if (args.min_hold) {
    request.policy.min_hold = positive_duration(*args.min_hold, "--min-hold");
  }
  if (args.lock_delay) {
    request.policy.lock_delay = positive_duration(*args.lock_delay, "--lock-delay");
  }
  request.policy.replace = args.replace;
  if (args.supersede && args.no_wait) {
    throw Error(ExitCode::usage, "--supersede is for waiters: it cannot be used with --no-wait");
  }
  request.policy.supersede = args.supersede;
  if (request.kind != lock::LockKind::exclusive()) {
    for (auto [given, name] :
         {std::pair{args.min_hold.has_value(), "--min-hold"},
          std::pair{args.lock_delay.has_value(), "--lock-delay"},
          std::pair{args.replace, "--replace"}, std::pair{args.supersede, "--supersede"}}) {
      if (given) {
        throw Error(ExitCode::usage, "{} is a policy of an exclusive lock: not with {}", name,
                    args.shared ? "--shared" : "--limit");
      }
    }
  }
  if (args.min_hold && request.keys.size() > 1) {
    // Several keys are taken one by one, and one taken while another is busy is given back
    // by its token: a --min-hold would keep it closed.
    throw Error(ExitCode::usage, "--min-hold takes one --key");
  }
  if (args.note) {
    request.note = resolve_note(*args.note);
  }
  return request;
}

} // namespace

GlobalOptions resolve_global(const Arguments& args)
{
  GlobalOptions global;
  stores::StoreConfig& store = global.store;
  store.urls = args.urls.empty() ? environment_urls() : args.urls;
  StorePasswords passwords = read_store_passwords(args.password_file, args.sentinel_password_file);
  store.password = std::move(passwords.password);
  store.sentinel_password = std::move(passwords.sentinel_password);
  global.hide_password = std::move(passwords.hide);
  store.request_timeout = positive_duration(args.connect_timeout, "--connect-timeout");
  store.tls = stores::TlsFiles{args.tls_ca, args.tls_cert, args.tls_key, args.tls_server_name};
  store.prefix = args.prefix;
  return global;
}

commands::RunOptions resolve_run(const Arguments& args, const GlobalOptions& global)
{
  commands::RunOptions run{resolve_lock_request(args, /*ttl_required=*/false)};
  if (args.shell_command) {
    if (!args.command.empty()) {
      throw Error(ExitCode::usage, "give either -c STRING or a command after --, not both");
    }
    if (args.shell_command->empty()) {
      throw Error(ExitCode::usage, "-c needs a shell command (got an empty string)");
    }
    run.command = {"/bin/sh", "-c", *args.shell_command};
  } else {
    run.command = args.command;
  }
  if (run.command.empty()) {
    throw Error(ExitCode::usage, "no command given: use 'dlock run --key KEY -- COMMAND [ARG...]' "
                                 "or -c 'SHELL COMMAND'");
  }
  run.record_command = args.record_command;
  run.on_lost_ignore = args.on_lost == "ignore";
  run.kill_after = optional_duration(args.kill_after, "--kill-after");
  if (!args.export_password) {
    run.set_env = global.hide_password.set;
    run.unset_env = global.hide_password.unset;
  }
  if (args.max_hold) {
    run.max_hold = positive_duration(*args.max_hold, "--max-hold");
    refuse_min_hold_past(run.policy.min_hold, *run.max_hold);
  }
  if (args.metrics_dir) {
    run.metrics_dir = resolve_metrics_dir(*args.metrics_dir);
  }
  run.replicas = resolve_replicas(args, run.ttl);
  return run;
}

commands::ElectOptions resolve_elect(const Arguments& args, const GlobalOptions& global)
{
  commands::ElectOptions elect{resolve_run(args, global)};
  if (elect.keys.size() > 1) {
    throw Error(ExitCode::usage, "elect takes one --key: an election has one name");
  }
  if (elect.kind != lock::LockKind::exclusive()) {
    throw Error(ExitCode::usage, "an election has one leader: not with {}",
                args.shared ? "--shared" : "--limit");
  }
  if (args.value) {
    if (args.value->empty()) {
      throw Error(ExitCode::usage, "--value is empty (leave it out for user@host pid N)");
    }
    if (util::printable(*args.value) != *args.value) {
      throw Error(ExitCode::usage, "--value must be printable text (got {})",
                  util::printable(*args.value));
    }
    if (args.value->size() > lock::max_holder_field_bytes) {
      throw Error(ExitCode::usage, "--value is longer than {} bytes", lock::max_holder_field_bytes);
    }
    elect.value = *args.value;
  }
  if (args.keep_campaigning && (args.no_wait || args.wait)) {
    throw Error(ExitCode::usage, "--keep-campaigning waits for leadership: not with {}",
                args.no_wait ? "--no-wait" : "--wait");
  }
  elect.keep_campaigning = args.keep_campaigning;
  elect.fair = !elect.no_wait; // candidates lead in the order they came
  return elect;
}

commands::LeaderOptions resolve_leader(const Arguments& args)
{
  return commands::LeaderOptions{resolve_key(args, "the election KEY"), args.json, args.watch};
}

commands::HistoryOptions resolve_history(const Arguments& args)
{
  commands::HistoryOptions options{resolve_key(args, "the lock KEY")};
  options.json = args.json;
  if (args.limit) {
    if (*args.limit < 1 || static_cast<std::size_t>(*args.limit) > lock::max_history_events) {
      throw Error(ExitCode::usage, "--limit: {} events at most are kept; give 1 to {}",
                  lock::max_history_events, lock::max_history_events);
    }
    options.limit = static_cast<std::size_t>(*args.limit);
  }
  return options;
}

commands::StatusOptions resolve_status(const Arguments& args)
{
  return commands::StatusOptions{resolve_key(args, "the lock KEY"), args.json};
}

commands::ListOptions resolve_list(const Arguments& args)
{
  using commands::ListFormat;
  commands::ListOptions list{.pattern = args.pattern};
  if (args.format) {
    const std::pair<std::string_view, ListFormat> formats[] = {
      {"table", ListFormat::table},
      {"json", ListFormat::json},
      {"prometheus", ListFormat::prometheus}};
    auto found = std::find_if(std::begin(formats), std::end(formats),
                              [&](const auto& format) { return format.first == *args.format; });
    if (found == std::end(formats)) {
      throw Error(ExitCode::usage, "--format must be table, json or prometheus (got '{}')",
                  util::printable(*args.format));
    }
    list.format = found->second;
  }
  if (args.json) {
    if (args.format && list.format != ListFormat::json) {
      throw Error(ExitCode::usage, "--json and --format {} cannot be used together", *args.format);
    }
    list.format = ListFormat::json;
  }
  return list;
}

commands::AcquireOptions resolve_acquire(const Arguments& args)
{
  commands::AcquireOptions acquire{resolve_lock_request(args, /*ttl_required=*/true)};
  acquire.replicas = resolve_replicas(args, acquire.ttl);
  acquire.json = args.json;
  if (!args.keep) {
    for (auto [given, name] : {std::pair{args.while_pid.has_value(), "--while-pid"},
                               std::pair{args.max_hold.has_value(), "--max-hold"},
                               std::pair{args.keep_on_lost.has_value(), "--on-lost"}}) {
      if (given) {
        throw Error(ExitCode::usage, "{} needs --keep", name);
      }
    }
    return acquire;
  }
  commands::KeepOptions& keep = acquire.keep.emplace();
  keep.kind = acquire.kind;
  if (args.while_pid) {
    if (*args.while_pid <= 0 || *args.while_pid > std::numeric_limits<pid_t>::max()) {
      throw Error(ExitCode::usage, "--while-pid must be a process id (got {})", *args.while_pid);
    }
    keep.while_pid = static_cast<pid_t>(*args.while_pid);
  }
  if (args.max_hold) {
    keep.max_hold = positive_duration(*args.max_hold, "--max-hold");
    refuse_min_hold_past(acquire.policy.min_hold, *keep.max_hold);
  }
  if (args.keep_on_lost) {
    keep.on_lost_signal = parse_on_lost_signal(*args.keep_on_lost);
  }
  return acquire;
}

commands::RenewOptions resolve_renew(const Arguments& args)
{
  commands::RenewOptions renew{.keys = resolve_keys(args)};
  renew.token = resolve_token(args, "renew");
  if (args.ttl) {
    renew.ttl = parse_ttl(*args.ttl);
  }
  // Without --ttl the lease length is the holder's, which only the store knows: then a
  // tenth of the default lease.
  renew.replicas = resolve_replicas(args, renew.ttl.value_or(lock::default_ttl));
  return renew;
}

commands::ReleaseOptions resolve_release(const Arguments& args)
{
  commands::ReleaseOptions release{.keys = resolve_keys(args)};
  release.force = args.force;
  if (args.force && args.token) {
    throw Error(ExitCode::usage, "--token and --force cannot be used together");
  }
  if (!args.force) {
    release.token = resolve_token(args, "release", ", or --force");
  }
  return release;
}

commands::WaitFreeOptions resolve_wait_free(const Arguments& args)
{
  commands::WaitFreeOptions wait{.key = resolve_one_key(args, "wait")};
  wait.wait = optional_duration(args.wait, "--wait");
  wait.conflict_exit_code = args.conflict_exit_code;
  return wait;
}

commands::BarrierOptions resolve_barrier(const Arguments& args)
{
  commands::BarrierOptions barrier{.key = resolve_one_key(args, "barrier")};
  barrier.parties = required(args.parties, "--parties");
  barrier.wait = optional_duration(args.wait, "--wait");
  barrier.conflict_exit_code = args.conflict_exit_code;
  return barrier;
}

commands::LatchOptions resolve_latch(const Arguments& args)
{
  using Action = commands::LatchOptions::Action;
  commands::LatchOptions latch{.key = resolve_one_key(args, "latch")};
  int actions = (args.latch_count ? 1 : 0) + (args.latch_down ? 1 : 0) + (args.wait ? 1 : 0);
  if (actions != 1) {
    throw Error(ExitCode::usage, "latch needs exactly one of --count N, --down, --wait [D]");
  }
  if (args.latch_count) {
    latch.action = Action::count;
    latch.count = *args.latch_count;
  } else if (args.latch_down) {
    latch.action = Action::down;
  } else {
    latch.action = Action::wait;
    // --wait alone: forever; --wait D: give up after D.
    if (!args.wait->empty()) {
      latch.wait = util::parse_duration(*args.wait, "--wait");
    }
  }
  if (args.expire) {
    if (latch.action != Action::count) {
      throw Error(ExitCode::usage, "--expire needs --count");
    }
    latch.expire = positive_duration(*args.expire, "--expire");
  }
  if (args.json && latch.action == Action::wait) {
    throw Error(ExitCode::usage, "--json goes with --count or --down (--wait prints nothing)");
  }
  latch.conflict_exit_code = args.conflict_exit_code;
  latch.json = args.json;
  return latch;
}

} // namespace dlock::cli
