#include "cli/app.hpp"

#include "cli/options.hpp"
#include "cli/secrets.hpp"
#include "cli/validation.hpp"
#include "cli/version.hpp"
#include "stores/open.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/syslog.hpp"

#include <signal.h>
#include <unistd.h>

#include <iostream>
#include <memory>
#include <type_traits>
#include <utility>

namespace dlock {

namespace {

// Resolves a subcommand's options, then opens the store and runs it: options are checked
// before the store is chosen, so that a usage error wins.
template<auto command, auto resolve>
int resolve_and_run(const cli::Arguments& args, const cli::GlobalOptions& global)
{
  const auto options = [&] {
    if constexpr (std::is_invocable_v<decltype(resolve), const cli::Arguments&>) {
      return resolve(args);
    } else {
      return resolve(args, global); // run's: it keeps the password from the command
    }
  }();
  std::unique_ptr<lock::Store> store = stores::open_store(global.store);
  commands::Context context{*store, global.store.request_timeout};
  return command(context, options);
}

// Runs the parsed subcommand; throws Error for every failure.
int dispatch(const cli::Subcommands& sub, const cli::Arguments& args)
{
  using Runner = int (*)(const cli::Arguments&, const cli::GlobalOptions&);
  const std::pair<const CLI::App*, Runner> runners[] = {
    {sub.run, resolve_and_run<commands::run, cli::resolve_run>},
    {sub.status, resolve_and_run<commands::status, cli::resolve_status>},
    {sub.list, resolve_and_run<commands::list, cli::resolve_list>},
    {sub.acquire, resolve_and_run<commands::acquire, cli::resolve_acquire>},
    {sub.renew, resolve_and_run<commands::renew, cli::resolve_renew>},
    {sub.release, resolve_and_run<commands::release, cli::resolve_release>},
    {sub.wait, resolve_and_run<commands::wait_until_free, cli::resolve_wait_free>},
    {sub.barrier, resolve_and_run<commands::barrier, cli::resolve_barrier>},
    {sub.latch, resolve_and_run<commands::latch, cli::resolve_latch>},
    {sub.elect, resolve_and_run<commands::elect, cli::resolve_elect>},
    {sub.leader, resolve_and_run<commands::leader, cli::resolve_leader>},
    {sub.history, resolve_and_run<commands::history, cli::resolve_history>},
  };
  for (const auto& [subcommand, runner] : runners) {
    if (subcommand->parsed()) {
      cli::GlobalOptions global = cli::resolve_global(args);
      cli::keep_secrets_out_of_reach(global.store);
      return runner(args, global);
    }
  }
  throw Error(ExitCode::usage, "no subcommand given");
}

} // namespace

int run_main(int argc, char** argv)
{
  // dlock reads files and environment its caller chooses (--config, --password-file, DLOCK_*)
  // and runs the caller's command: set-uid or set-gid, it would do so with privileges the
  // caller lacks.
  if (::getuid() != ::geteuid() || ::getgid() != ::getegid()) {
    util::log_error("refusing to run set-uid or set-gid");
    return static_cast<int>(ExitCode::config);
  }
  ::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"dlock: run a command under a distributed lock held in Redis, PostgreSQL, "
               "MySQL/MariaDB, etcd, ZooKeeper or a local directory",
               "dlock"};
  app.set_version_flag("--version", std::function<std::string()>(cli::version_text));
  // At most one subcommand; none is reported by dispatch, after an unknown option would be
  // (CLI11 checks a required subcommand before unknown options).
  app.require_subcommand(0, 1);
  app.fallthrough();
  cli::Arguments args;
  cli::Subcommands sub = cli::define_command_line(app, args);

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
    util::log_error("{} (see '{}')", cli::describe_parse_error(app, error), cli::help_command(app));
    return static_cast<int>(ExitCode::usage);
  }
  bool url_password_in_argv = cli::scrub_url_passwords(argc, argv);

  try {
    cli::apply_config_defaults(app, sub, args);
    util::set_verbosity(args.quiet     ? util::Verbosity::quiet
                        : args.verbose ? util::Verbosity::verbose
                                       : util::Verbosity::normal);
    util::set_syslog(args.syslog);
    if (url_password_in_argv) {
      util::log_warning("a password in --url is visible to other users in ps; use "
                        "--password-file or DLOCK_PASSWORD");
    }
    return dispatch(sub, args);
  } catch (const Error& error) {
    if (error.code() == ExitCode::usage) {
      util::log_error("{} (see '{}')", error.what(), cli::help_command(app));
    } else {
      util::log_error("{}", error.what());
    }
    return static_cast<int>(error.code());
  } catch (const std::exception& error) {
    util::log_error("internal error: {}", error.what());
    return static_cast<int>(ExitCode::internal);
  }
}

} // namespace dlock
