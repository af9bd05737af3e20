#include "cli/arguments.hpp"

#include "cli/config_file.hpp"
#include "util/url.hpp"
#include "util/error.hpp"

#include <signal.h>

#include <cerrno>
#include <charconv>
#include <limits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace dlock::cli {

namespace {

std::string read_password_file(const std::string& path)
{
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) {
    throw Error(ExitCode::config, "password file '{}' is a directory", path);
  }
  std::ifstream file(path);
  if (!file) {
    throw Error(ExitCode::config, "cannot read password file '{}': {}", path, std::strerror(errno));
  }
  std::string password;
  std::getline(file, password);
  if (!password.empty() && password.back() == '\r') {
    password.pop_back();
  }
  if (password.empty()) {
    throw Error(ExitCode::config, "password file '{}' is empty", path);
  }
  return password;
}

// The value of an option the subcommand needs. CLI11's required() is not used: it is checked
// before unknown options are, and "--key is required" would hide a mistyped option.
const std::string& required(const std::optional<std::string>& value, std::string_view name)
{
  if (!value) {
    throw Error(ExitCode::usage, "{} is required", name);
  }
  return *value;
}

// Shows an option as REQUIRED in --help, as CLI11's required() would; see required().
CLI::Option* shown_required(CLI::Option* option, const std::string& type_name)
{
  return option->type_name(type_name + " REQUIRED");
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

// -k KEY for a subcommand: any number of occurrences, one value each (the words after it are
// the command's).
void add_key_option(CLI::App& command, Arguments& args, const std::string& what)
{
  shown_required(command.add_option("-k,--key", args.keys, what)
                   ->allow_extra_args(false)
                   ->expected(1)
                   ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll),
                 "TEXT");
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
  lock::LockKind kind = args.shared ? lock::LockKind::shared()
                                    : lock::LockKind::semaphore(args.limit.value_or(1));
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

util::Millis parse_ttl(const std::string& text)
{
  util::Millis ttl = util::parse_duration(text, "--ttl");
  if (ttl < std::chrono::seconds(1)) {
    throw Error(ExitCode::usage, "--ttl must be at least 1s (got {})", text);
  }
  return ttl;
}

// --wait / --no-wait, shared by run and acquire.
void resolve_wait(const Arguments& args, std::optional<util::Millis>& wait, bool& no_wait,
                  bool& fair)
{
  if (args.fair && args.no_wait) {
    throw Error(ExitCode::usage, "--fair and --no-wait cannot be used together");
  }
  fair = args.fair;
  if (args.wait) {
    if (args.no_wait) {
      throw Error(ExitCode::usage, "--wait and --no-wait cannot be used together");
    }
    wait = util::parse_duration(*args.wait, "--wait");
  }
  no_wait = args.no_wait;
}

// -E N: the exit status that says "not obtained" or "--wait ran out" (flock's -E).
void add_conflict_exit_code(CLI::App& command, Arguments& args, const std::string& what)
{
  command.add_option("-E,--conflict-exit-code", args.conflict_exit_code, what)
    ->check(CLI::Range(0, 255))
    ->capture_default_str();
}

// How to take the lock, shared by run and acquire; flock's spellings (--timeout, -x) included.
// --wait-replicas N and --wait-replicas-timeout D, for run, acquire and renew.
void add_replica_options(CLI::App& command, Arguments& args, const std::string& what)
{
  command.add_option("--wait-replicas", args.wait_replicas, what)
    ->type_name("N")
    ->check(CLI::Range(0, 1000))
    ->capture_default_str();
  command
    .add_option("--wait-replicas-timeout", args.wait_replicas_timeout,
                "how long to wait for them (default ttl/10)")
    ->type_name("D");
}

void add_acquire_options(CLI::App& command, Arguments& args)
{
  command
    .add_option("-w,--wait,--timeout", args.wait,
                "give up after waiting D (default: wait forever)")
    ->type_name("D");
  command.add_flag("-n,--no-wait", args.no_wait, "give up at once if the lock is held");
  command.add_flag("-x,--exclusive")
    ->description("an exclusive lock (the default; for flock compatibility)");
  command.add_flag("-s,--shared", args.shared,
                   "a shared (read) lock: many shared holders, or one exclusive");
  command.add_option("--limit", args.limit, "a semaphore: up to N holders at once (same N for all)")
    ->type_name("N")
    ->check(CLI::Range(1, 1000000));
  command.add_flag("--fair", args.fair, "first come, first served among waiters");
  add_conflict_exit_code(command, args, "exit status when the lock is not obtained");
  add_replica_options(command, args,
                      "count the lock (and each renewal) only once N replicas have it (Redis WAIT)");
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
    ack.timeout = util::parse_duration(*args.wait_replicas_timeout, "--wait-replicas-timeout");
    if (ack.timeout.count() <= 0) {
      throw Error(ExitCode::usage, "--wait-replicas-timeout must be greater than zero");
    }
  } else if (ack.replicas > 0) {
    ack.timeout = ttl / 10;
  }
  return ack;
}

// DLOCK_URL: several URLs separated by blanks (a comma belongs to a Sentinel URL's host list).
std::vector<std::string> environment_urls()
{
  std::vector<std::string> urls;
  const char* env = std::getenv("DLOCK_URL");
  std::string_view rest = env != nullptr ? env : "";
  constexpr std::string_view blanks = " \t\n\r\f\v";
  while (true) {
    std::size_t start = rest.find_first_not_of(blanks);
    if (start == std::string_view::npos) {
      return urls;
    }
    rest.remove_prefix(start);
    std::size_t end = std::min(rest.find_first_of(blanks), rest.size());
    urls.emplace_back(rest.substr(0, end));
    rest.remove_prefix(end);
  }
}

void add_global_options(CLI::App& app, Arguments& args)
{
  app.add_option("-u,--url", args.urls,
                 "Lock store URL: redis://[[user][:pass]@]host[:port][/db], rediss://..., "
                 "unix:///path.sock[?db=N], redis-sentinel://host[:port][,host[:port]...][/db]#MASTER, "
                 "postgres://[user@]host[:port]/db (a libpq URI), "
                 "mysql://[user[:pass]@]host[:port]/db[?socket=/path] (or mariadb://), "
                 "zk://[user:pass@]host[:port][,host[:port]...][/chroot]; "
                 "one per -u; env DLOCK_URL (separated by blanks)")
    // One value per occurrence (the words after it are the command's), any number of them;
    // without expected(1) --help would also show "URL ...".
    ->allow_extra_args(false)
    ->expected(1)
    ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
    ->type_name("URL");
  app.add_option("--password-file", args.password_file,
                 "read the Redis password from FILE (or set DLOCK_PASSWORD)")
    ->type_name("FILE");
  app.add_option("--sentinel-password-file", args.sentinel_password_file,
                 "read the Sentinels' own password from FILE (or set DLOCK_SENTINEL_PASSWORD)")
    ->type_name("FILE");
  app.add_option("--tls-ca", args.tls_ca, "CA bundle for rediss://, postgres:// and mysql://")
    ->envname("DLOCK_TLS_CA")
    ->type_name("FILE");
  app.add_option("--tls-cert", args.tls_cert, "client certificate for rediss://, postgres:// and mysql://")
    ->envname("DLOCK_TLS_CERT")
    ->type_name("FILE");
  app.add_option("--tls-key", args.tls_key, "client key for rediss://, postgres:// and mysql://")
    ->envname("DLOCK_TLS_KEY")
    ->type_name("FILE");
  app.add_option("--tls-server-name", args.tls_server_name, "expected server name for rediss://")
    ->envname("DLOCK_TLS_SERVER_NAME")
    ->type_name("NAME");
  app.add_option("--prefix", args.prefix, "namespace of every key dlock writes")
    ->envname("DLOCK_PREFIX")
    ->capture_default_str();
  app.add_option("--connect-timeout", args.connect_timeout, "per connection attempt and request")
    ->envname("DLOCK_CONNECT_TIMEOUT")
    ->type_name("D")
    ->capture_default_str();
  app.add_flag("-v,--verbose", args.verbose, "more diagnostics on stderr")->envname("DLOCK_VERBOSE");
  app.add_flag("-q,--quiet", args.quiet, "no diagnostics on stderr except errors")
    ->envname("DLOCK_QUIET");
  app.add_flag("--syslog", args.syslog,
               "also log acquisitions, skips, waits, losses and releases to syslog")
    ->envname("DLOCK_SYSLOG");
  app.add_option("--config", args.config,
                 "read defaults from FILE only (default: /etc/dlock/dlock.conf, then "
                 "~/.config/dlock/dlock.conf)")
    ->envname("DLOCK_CONFIG")
    ->type_name("FILE");
}

} // namespace

namespace {

void add_run_options(CLI::App& run, Arguments& args)
{
  add_key_option(run, args, "lock name (1 to 1024 bytes); repeat it to take several at once");
  run.add_option("-t,--ttl", args.ttl, "lease length, renewed while the command runs (default 30s, min 1s)")
    ->type_name("D");
  add_acquire_options(run, args);
  run.add_option("-c,--command", args.shell_command, "run STRING with /bin/sh -c")
    ->type_name("STRING");
  run.add_option("--on-lost", args.on_lost, "when the lease is lost: stop the command, or ignore")
    ->check(CLI::IsMember({"stop", "ignore"}))
    ->capture_default_str();
  run.add_option("--kill-after", args.kill_after, "grace between SIGTERM and SIGKILL (default ttl/4)")
    ->type_name("D");
  run.add_option("--max-hold", args.max_hold, "stop the command after D (exit 124)")
    ->type_name("D");
  run.add_flag("--export-password", args.export_password,
               "let the command see DLOCK_PASSWORD and a password in DLOCK_URL");
  run.add_flag("--record-command", args.record_command,
               "record the whole command line for status and list (default: the program's name)");
  run.add_option("--metrics-dir", args.metrics_dir,
                 "write a Prometheus text file per key there (node_exporter's textfile collector)")
    ->envname("DLOCK_METRICS_DIR")
    ->type_name("DIR");
  run.add_option("command", args.command, "the command and its arguments, after --");
  run.positionals_at_end();
}

void add_status_options(CLI::App& status, Arguments& args)
{
  shown_required(status.add_option("key", args.key, "lock name"), "TEXT");
  status.add_flag("--json", args.json, "one JSON document");
}

void add_list_options(CLI::App& list, Arguments& args)
{
  list.add_option("pattern", args.pattern, "glob on lock names")->capture_default_str();
  list.add_flag("--json", args.json, "one JSON document");
}

void add_acquire_command_options(CLI::App& acquire, Arguments& args)
{
  add_key_option(acquire, args, "lock name; repeat it to take several at once");
  shown_required(acquire.add_option("-t,--ttl", args.ttl, "lease length (min 1s)"), "D");
  add_acquire_options(acquire, args);
  acquire.add_flag("--json", args.json, "print token and fencing token as JSON");
  acquire.add_flag("--keep", args.keep,
                   "a detached holder renews the lease until release, --max-hold, or the calling "
                   "script's exit");
  acquire.add_option("--while-pid", args.while_pid,
                     "with --keep: hold while process PID lives (default: the calling script)")
    ->type_name("PID");
  acquire.add_option("--max-hold", args.max_hold, "with --keep: release after D")->type_name("D");
  acquire.add_option("--on-lost", args.keep_on_lost,
                     "with --keep: signal:NAME sends NAME to the calling script if the lease is lost")
    ->type_name("signal:NAME");
}

void add_renew_options(CLI::App& renew, Arguments& args)
{
  add_key_option(renew, args, "lock name; repeat it for each key acquire took");
  renew.add_option("--token", args.token, "the token acquire printed (required, or set DLOCK_TOKEN)");
  renew.add_option("-t,--ttl", args.ttl, "new lease length (default: the last one set by acquire or renew --ttl)")
    ->type_name("D");
  add_replica_options(renew, args, "count the renewal only once N replicas have it (Redis WAIT)");
}

void add_release_options(CLI::App& release, Arguments& args)
{
  add_key_option(release, args, "lock name; repeat it for each key acquire took");
  release.add_option("--token", args.token, "the token acquire printed (or set DLOCK_TOKEN)");
  release.add_flag("--force", args.force, "release whoever holds it");
}

void add_wait_free_options(CLI::App& wait, Arguments& args)
{
  add_key_option(wait, args, "lock name to wait for");
  wait.add_option("-w,--wait,--timeout", args.wait, "give up after waiting D (default: wait forever)")
    ->type_name("D");
  add_conflict_exit_code(wait, args, "exit status when --wait runs out");
}

void add_barrier_options(CLI::App& barrier, Arguments& args)
{
  add_key_option(barrier, args, "barrier name");
  shown_required(barrier.add_option("--parties", args.parties,
                                    "how many callers make the barrier trip (same N for all)"),
                 "N")
    ->check(CLI::Range(1, 1000000));
  barrier.add_option("-w,--wait,--timeout", args.wait,
                     "give up after waiting D, withdrawing the arrival (default: wait forever)")
    ->type_name("D");
  add_conflict_exit_code(barrier, args, "exit status when --wait runs out");
}

void add_latch_options(CLI::App& latch, Arguments& args)
{
  add_key_option(latch, args, "latch name");
  latch.add_option("--count", args.latch_count, "set the latch to N (again)")
    ->type_name("N")
    ->check(CLI::Range(0LL, 1000000000LL));
  latch.add_flag("--down", args.latch_down, "count the latch down by one");
  latch.add_option("-w,--wait", args.wait, "block until the count is zero; give up after D if given")
    ->type_name("[D]")
    ->expected(0, 1);
  latch.add_option("--expire", args.expire, "with --count: delete the latch after D (default 24h)")
    ->type_name("D");
  add_conflict_exit_code(latch, args, "exit status when --wait runs out");
  latch.add_flag("--json", args.json, "with --count or --down: print the count as JSON");
}

// A subcommand whose options are declared only once CLI11 meets it on the command line:
// declaring every subcommand's options was most of dlock's start-up work, and a command line
// names one subcommand. Its --help still lists them all, since they exist before it is parsed.
CLI::App* add_subcommand(CLI::App& app, Arguments& args, const std::string& name,
                         const std::string& description,
                         void (*add_options)(CLI::App&, Arguments&))
{
  CLI::App* sub = app.add_subcommand(name, description);
  sub->preparse_callback([sub, &args, add_options](std::size_t) { add_options(*sub, args); });
  return sub;
}

} // namespace

Subcommands define_command_line(CLI::App& app, Arguments& args)
{
  add_global_options(app, args);
  Subcommands sub;
  sub.run = add_subcommand(app, args, "run", "run a command while holding the lock", add_run_options);
  sub.status = add_subcommand(app, args, "status", "show who holds a lock (exit 0 held, 1 free)",
                              add_status_options);
  sub.list = add_subcommand(app, args, "list", "list held locks under the prefix", add_list_options);
  sub.acquire = add_subcommand(app, args, "acquire", "take a lock for several steps; print its token",
                               add_acquire_command_options);
  sub.renew = add_subcommand(app, args, "renew", "extend a lease held by a token (76 if not held)",
                             add_renew_options);
  sub.release = add_subcommand(app, args, "release", "release a lock by token, or --force",
                               add_release_options);
  sub.wait = add_subcommand(app, args, "wait", "block until a lock is free; take nothing",
                            add_wait_free_options);
  sub.barrier = add_subcommand(app, args, "barrier", "block until N callers have arrived",
                               add_barrier_options);
  sub.latch = add_subcommand(app, args, "latch", "set, count down or wait for a count-down latch",
                             add_latch_options);
  return sub;
}

namespace {

// A password given by a file option, or else by the environment: NAME (the secret itself) or
// NAME_FILE (where to read it; the form nested dlock calls are given). The file read, if any,
// goes to file_read.
std::optional<std::string> resolve_password(const std::string& option_file, const std::string& name,
                                            std::string& file_read)
{
  const char* env_password = std::getenv(name.c_str());
  const char* env_password_file = std::getenv((name + "_FILE").c_str());
  file_read = option_file;
  if (file_read.empty() && (env_password == nullptr || *env_password == '\0')
      && env_password_file != nullptr) {
    file_read = env_password_file;
  }
  if (!file_read.empty()) {
    return read_password_file(file_read);
  }
  if (env_password != nullptr && *env_password != '\0') {
    return env_password;
  }
  return std::nullopt;
}

// Tells nested calls where a password was read from instead of the password (a file name is
// no secret).
void pass_password_file(EnvironmentChanges& changes, const std::string& name, const std::string& file)
{
  if (!file.empty()) {
    std::error_code error;
    std::filesystem::path absolute = std::filesystem::absolute(file, error);
    changes.set.emplace_back(name, error ? file : absolute.string());
  }
}

// What keeps the passwords out of a command's environment; *_file: where dlock read them
// from, if from files, which nested calls are told instead.
EnvironmentChanges hide_password(const std::string& password_file,
                                 const std::string& sentinel_password_file)
{
  EnvironmentChanges changes;
  changes.unset.emplace_back("DLOCK_PASSWORD");
  changes.unset.emplace_back("DLOCK_SENTINEL_PASSWORD");
  std::vector<std::string> urls = environment_urls();
  if (std::any_of(urls.begin(), urls.end(), [](const auto& url) { return util::url_has_password(url); })) {
    std::string without;
    for (const auto& url : urls) {
      without += (without.empty() ? "" : " ") + util::url_without_password(url);
    }
    changes.set.emplace_back("DLOCK_URL", without);
  }
  pass_password_file(changes, "DLOCK_PASSWORD_FILE", password_file);
  pass_password_file(changes, "DLOCK_SENTINEL_PASSWORD_FILE", sentinel_password_file);
  return changes;
}

} // namespace

GlobalOptions resolve_global(const Arguments& args)
{
  GlobalOptions global;
  stores::StoreConfig& store = global.store;
  store.urls = args.urls.empty() ? environment_urls() : args.urls;
  std::string password_file;
  std::string sentinel_password_file;
  store.password = resolve_password(args.password_file, "DLOCK_PASSWORD", password_file);
  store.sentinel_password =
    resolve_password(args.sentinel_password_file, "DLOCK_SENTINEL_PASSWORD", sentinel_password_file);
  global.hide_password = hide_password(password_file, sentinel_password_file);
  store.request_timeout = util::parse_duration(args.connect_timeout, "--connect-timeout");
  if (store.request_timeout.count() <= 0) {
    throw Error(ExitCode::usage, "--connect-timeout must be greater than zero");
  }
  store.tls = stores::TlsFiles{args.tls_ca, args.tls_cert, args.tls_key, args.tls_server_name};
  store.prefix = args.prefix;
  return global;
}

commands::RunOptions resolve_run(const Arguments& args, const GlobalOptions& global)
{
  commands::RunOptions run{.keys = resolve_keys(args), .kind = resolve_kind(args)};
  if (args.ttl) {
    run.ttl = parse_ttl(*args.ttl);
  }
  resolve_wait(args, run.wait, run.no_wait, run.fair);
  run.conflict_exit_code = args.conflict_exit_code;
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
  if (args.kill_after) {
    run.kill_after = util::parse_duration(*args.kill_after, "--kill-after");
  }
  if (!args.export_password) {
    run.set_env = global.hide_password.set;
    run.unset_env = global.hide_password.unset;
  }
  if (args.max_hold) {
    run.max_hold = util::parse_duration(*args.max_hold, "--max-hold");
    if (run.max_hold->count() <= 0) {
      throw Error(ExitCode::usage, "--max-hold must be greater than zero");
    }
  }
  if (args.metrics_dir) {
    if (args.metrics_dir->empty()) {
      throw Error(ExitCode::usage, "--metrics-dir names no directory");
    }
    run.metrics_dir = *args.metrics_dir;
  }
  run.replicas = resolve_replicas(args, run.ttl);
  return run;
}

commands::StatusOptions resolve_status(const Arguments& args)
{
  return commands::StatusOptions{resolve_key(args, "the lock KEY"), args.json};
}

commands::ListOptions resolve_list(const Arguments& args)
{
  return commands::ListOptions{args.pattern, args.json};
}

commands::AcquireOptions resolve_acquire(const Arguments& args)
{
  commands::AcquireOptions acquire{.keys = resolve_keys(args), .kind = resolve_kind(args)};
  acquire.ttl = parse_ttl(required(args.ttl, "--ttl"));
  resolve_wait(args, acquire.wait, acquire.no_wait, acquire.fair);
  acquire.conflict_exit_code = args.conflict_exit_code;
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
    keep.max_hold = util::parse_duration(*args.max_hold, "--max-hold");
    if (keep.max_hold->count() <= 0) {
      throw Error(ExitCode::usage, "--max-hold must be greater than zero");
    }
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
  if (args.wait) {
    wait.wait = util::parse_duration(*args.wait, "--wait");
  }
  wait.conflict_exit_code = args.conflict_exit_code;
  return wait;
}

commands::BarrierOptions resolve_barrier(const Arguments& args)
{
  commands::BarrierOptions barrier{.key = resolve_one_key(args, "barrier")};
  if (!args.parties) {
    throw Error(ExitCode::usage, "--parties is required");
  }
  barrier.parties = *args.parties;
  if (args.wait) {
    barrier.wait = util::parse_duration(*args.wait, "--wait");
  }
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
    latch.expire = util::parse_duration(*args.expire, "--expire");
    if (latch.expire.count() <= 0) {
      throw Error(ExitCode::usage, "--expire must be greater than zero");
    }
  }
  if (args.json && latch.action == Action::wait) {
    throw Error(ExitCode::usage, "--json goes with --count or --down (--wait prints nothing)");
  }
  latch.conflict_exit_code = args.conflict_exit_code;
  latch.json = args.json;
  return latch;
}

void apply_config_defaults(CLI::App& app, const Subcommands& sub, Arguments& args)
{
  std::vector<ConfigFile> files;
  for (const std::string& path : config_paths(args.config)) {
    files.push_back(read_config_file(path));
  }
  if (files.empty()) {
    return;
  }
  // Each file checked whole against fresh declarations, so that a mistake is found on the
  // day it is made, not on the day its option is first used.
  for (const ConfigFile& file : files) {
    CLI::App scratch;
    Arguments scratch_args;
    add_global_options(scratch, scratch_args);
    CLI::App* scratch_run = scratch.add_subcommand("run");
    add_run_options(*scratch_run, scratch_args);
    apply_config({file}, {{"", &scratch}, {"run", scratch_run}});
  }
  apply_config(files, {{"", &app}, {"run", sub.run->parsed() ? sub.run : nullptr}});
}

std::string help_command(const CLI::App& app)
{
  std::vector<CLI::App*> subcommands = app.get_subcommands();
  return subcommands.empty() ? "dlock --help"
                             : fmt::format("dlock {} --help", subcommands.front()->get_name());
}

std::string describe_parse_error(const CLI::App& app, const CLI::ParseError& error)
{
  if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    for (const std::string& extra : app.remaining(true)) {
      if (extra.starts_with("-") && extra != "--") {
        return fmt::format("unknown option {}", extra.substr(0, extra.find('=')));
      }
    }
  }
  return error.what();
}

std::vector<char*> url_arguments(int argc, char** argv)
{
  std::vector<char*> urls;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg(argv[i]);
    if (arg == "--") {
      break; // the command's own arguments are not ours to judge or change
    }
    if ((arg == "-u" || arg == "--url") && i + 1 < argc) {
      urls.push_back(argv[++i]);
    } else if (arg.starts_with("--url=")) {
      urls.push_back(argv[i] + 6);
    } else if (arg.starts_with("-u") && !arg.starts_with("--") && arg.size() > 2) {
      urls.push_back(argv[i] + 2);
    }
  }
  return urls;
}

bool scrub_url_passwords(int argc, char** argv)
{
  bool found = false;
  for (char* url : url_arguments(argc, argv)) {
    std::vector<util::PasswordSpan> secrets = util::secret_spans(url);
    if (secrets.empty()) {
      continue;
    }
    found = true;
    // "scheme://user:PASSWORD@rest?password=X" becomes "scheme://user:***@rest?password=***",
    // padded with NULs.
    std::string scrubbed = util::url_redacted(url);
    std::size_t length = std::strlen(url);
    if (scrubbed.size() <= length) {
      std::memcpy(url, scrubbed.c_str(), scrubbed.size());
      std::memset(url + scrubbed.size(), 0, length - scrubbed.size());
    } else {
      for (const util::PasswordSpan& secret : secrets) {
        std::memset(url + secret.offset, '*', secret.length); // too short to shrink
      }
    }
  }
  return found;
}

} // namespace dlock::cli
