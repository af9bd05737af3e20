#include "cli/app.hpp"

#include "cli/options.hpp"
#include "cli/version.hpp"
#include "commands/run.hpp"
#include "lock/keys.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

#include <CLI/CLI.hpp>

#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

namespace dlock {

namespace {

// Raw option values as typed; turned into cli::GlobalOptions by resolve_global.
struct GlobalArgs {
  std::vector<std::string> urls;
  std::string password_file;
  std::string tls_ca, tls_cert, tls_key, tls_server_name;
  std::string prefix = "dlock:";
  std::string connect_timeout = "2s";
  bool verbose = false;
  bool quiet = false;
};

// Raw `run` option values as typed.
struct RunArgs {
  std::string key;
  std::string ttl = "30s";
  std::string wait;
  bool no_wait = false;
  int conflict_exit_code = 75;
  std::string shell_command;
  std::string on_lost = "stop";
  std::string kill_after;
  std::string max_hold;
  std::vector<std::string> command;
};

std::string read_password_file(const std::string& path)
{
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

cli::GlobalOptions resolve_global(const GlobalArgs& args)
{
  cli::GlobalOptions global;
  std::vector<std::string> urls = args.urls;
  if (urls.empty()) {
    urls.emplace_back("redis://127.0.0.1:6379");
  }
  if (urls.size() > 1) {
    throw Error(ExitCode::usage,
                "{} URLs given, but Redlock across several masters is not supported yet; give one "
                "--url",
                urls.size());
  }
  global.connect.endpoint = redis::parse_url(urls.front());
  if (!args.password_file.empty()) {
    global.connect.password = read_password_file(args.password_file);
  } else if (const char* env = std::getenv("DLOCK_PASSWORD"); env != nullptr && *env != '\0') {
    global.connect.password = env;
  }
  global.connect.connect_timeout = util::parse_duration(args.connect_timeout, "--connect-timeout");
  if (global.connect.connect_timeout.count() <= 0) {
    throw Error(ExitCode::usage, "--connect-timeout must be greater than zero");
  }
  global.prefix = args.prefix;
  return global;
}

cli::RunOptions resolve_run(const RunArgs& args)
{
  cli::RunOptions run;
  run.key = args.key;
  lock::validate_lock_name(run.key);
  run.ttl = util::parse_duration(args.ttl, "--ttl");
  if (run.ttl < std::chrono::seconds(1)) {
    throw Error(ExitCode::usage, "--ttl must be at least 1s (got {})", args.ttl);
  }
  if (!args.wait.empty()) {
    if (args.no_wait) {
      throw Error(ExitCode::usage, "--wait and --no-wait cannot be used together");
    }
    run.wait = util::parse_duration(args.wait, "--wait");
  }
  run.no_wait = args.no_wait;
  run.conflict_exit_code = args.conflict_exit_code;
  if (!args.shell_command.empty() && !args.command.empty()) {
    throw Error(ExitCode::usage, "give either -c STRING or a command after --, not both");
  }
  if (!args.shell_command.empty()) {
    run.command = {"/bin/sh", "-c", args.shell_command};
  } else {
    run.command = args.command;
  }
  if (run.command.empty()) {
    throw Error(ExitCode::usage, "no command given: use 'dlock run --key KEY -- COMMAND [ARG...]' "
                                 "or -c 'SHELL COMMAND'");
  }
  run.on_lost_ignore = args.on_lost == "ignore";
  if (!args.kill_after.empty()) {
    run.kill_after = util::parse_duration(args.kill_after, "--kill-after");
  }
  if (!args.max_hold.empty()) {
    run.max_hold = util::parse_duration(args.max_hold, "--max-hold");
    if (run.max_hold->count() <= 0) {
      throw Error(ExitCode::usage, "--max-hold must be greater than zero");
    }
  }
  return run;
}

// Overwrites a password typed into a --url argument, so `ps` stops showing it soon after start.
void scrub_url_passwords(int argc, char** argv)
{
  for (int i = 1; i < argc; ++i) {
    char* arg = argv[i];
    if (!redis::url_has_password(arg)) {
      continue;
    }
    char* scheme_end = std::strstr(arg, "://");
    char* at = std::strrchr(arg, '@');
    char* colon = scheme_end != nullptr ? std::strchr(scheme_end + 3, ':') : nullptr;
    for (char* p = colon != nullptr ? colon + 1 : at; p != nullptr && p < at; ++p) {
      *p = '*';
    }
  }
}

void add_global_options(CLI::App& app, GlobalArgs& args)
{
  app.add_option("-u,--url", args.urls,
                 "Redis URL: redis://[[user][:pass]@]host[:port][/db], rediss://..., "
                 "unix:///path.sock[?db=N]")
    ->envname("DLOCK_URL")
    ->delimiter(',')
    ->type_name("URL");
  app.add_option("--password-file", args.password_file,
                 "read the Redis password from FILE (or set DLOCK_PASSWORD)")
    ->type_name("FILE");
  app.add_option("--tls-ca", args.tls_ca, "CA bundle for rediss://")->envname("DLOCK_TLS_CA")->type_name("FILE");
  app.add_option("--tls-cert", args.tls_cert, "client certificate for rediss://")->envname("DLOCK_TLS_CERT")->type_name("FILE");
  app.add_option("--tls-key", args.tls_key, "client key for rediss://")->envname("DLOCK_TLS_KEY")->type_name("FILE");
  app.add_option("--tls-server-name", args.tls_server_name, "expected server name for rediss://")
    ->envname("DLOCK_TLS_SERVER_NAME")
    ->type_name("NAME");
  app.add_option("--prefix", args.prefix, "namespace of every key dlock writes")
    ->envname("DLOCK_PREFIX")
    ->capture_default_str();
  app.add_option("--connect-timeout", args.connect_timeout, "per connection attempt and request")
    ->type_name("D")
    ->capture_default_str();
  app.add_flag("-v,--verbose", args.verbose, "more diagnostics on stderr");
  app.add_flag("-q,--quiet", args.quiet, "no diagnostics on stderr except errors");
}

void add_run_options(CLI::App& run, RunArgs& args)
{
  run.add_option("-k,--key", args.key, "lock name (1 to 1024 bytes)")->required();
  run.add_option("-t,--ttl", args.ttl, "lease length, renewed while the command runs (min 1s)")
    ->type_name("D")
    ->capture_default_str();
  run.add_option("-w,--wait", args.wait, "give up after waiting D (default: wait forever)")->type_name("D");
  run.add_flag("-n,--no-wait", args.no_wait, "give up at once if the lock is held");
  run.add_option("-E,--conflict-exit-code", args.conflict_exit_code,
                 "exit status when the lock is not obtained")
    ->check(CLI::Range(0, 255))
    ->capture_default_str();
  run.add_option("-c,--command", args.shell_command, "run STRING with /bin/sh -c")->type_name("STRING");
  run.add_option("--on-lost", args.on_lost, "when the lease is lost: stop the command, or ignore")
    ->check(CLI::IsMember({"stop", "ignore"}))
    ->capture_default_str();
  run.add_option("--kill-after", args.kill_after, "grace between SIGTERM and SIGKILL (default ttl/4)")
    ->type_name("D");
  run.add_option("--max-hold", args.max_hold, "stop the command after D (exit 124)")->type_name("D");
  run.add_option("command", args.command, "the command and its arguments, after --");
  run.positionals_at_end();
}

} // namespace

int run_main(int argc, char** argv)
{
  ::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"dlock: run a command under a distributed lock held in Redis", "dlock"};
  app.set_version_flag("--version", cli::version_text());
  app.require_subcommand(1);
  app.fallthrough();
  GlobalArgs global_args;
  add_global_options(app, global_args);
  RunArgs run_args;
  CLI::App* run = app.add_subcommand("run", "run a command while holding the lock");
  add_run_options(*run, run_args);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion&) {
    std::cout << cli::version_text() << '\n';
    return 0;
  } catch (const CLI::ParseError& error) {
    util::log_error("{} (see 'dlock --help')", error.what());
    return static_cast<int>(ExitCode::usage);
  }
  util::set_verbosity(global_args.quiet     ? util::Verbosity::quiet
                      : global_args.verbose ? util::Verbosity::verbose
                                            : util::Verbosity::normal);
  bool url_password_in_argv = false;
  for (int i = 1; i < argc; ++i) {
    url_password_in_argv = url_password_in_argv || redis::url_has_password(argv[i]);
  }
  scrub_url_passwords(argc, argv);

  try {
    if (url_password_in_argv) {
      util::log_warning("a password in --url is visible to other users in ps; use "
                        "--password-file or DLOCK_PASSWORD");
    }
    cli::GlobalOptions global = resolve_global(global_args);
    if (run->parsed()) {
      return commands::run(global, resolve_run(run_args));
    }
    throw Error(ExitCode::usage, "no subcommand given (see 'dlock --help')");
  } catch (const Error& error) {
    util::log_error("{}", error.what());
    return static_cast<int>(error.code());
  } catch (const std::exception& error) {
    util::log_error("internal error: {}", error.what());
    return static_cast<int>(ExitCode::internal);
  }
}

} // namespace dlock
