#include "cli/options.hpp"

#include "cli/config_file.hpp"

#include <fmt/format.h>

#include <vector>

namespace dlock::cli {

namespace {

// Shows an option as REQUIRED in --help, as CLI11's required() would; see required() in
// cli/validation.cpp.
CLI::Option* shown_required(CLI::Option* option, const std::string& type_name)
{
  return option->type_name(type_name + " REQUIRED");
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

// -w D, with flock's spelling --timeout: how long to wait before giving up.
void add_wait_option(CLI::App& command, Arguments& args, const std::string& what)
{
  command.add_option("-w,--wait,--timeout", args.wait, what)->type_name("D");
}

// -E N: the exit status that says "not obtained" or "--wait ran out" (flock's -E).
void add_conflict_exit_code(CLI::App& command, Arguments& args, const std::string& what)
{
  command.add_option("-E,--conflict-exit-code", args.conflict_exit_code, what)
    ->check(CLI::Range(0, 255))
    ->capture_default_str();
}

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

// How to take the lock, shared by run and acquire; flock's spellings (--timeout, -x) included.
void add_acquire_options(CLI::App& command, Arguments& args)
{
  add_wait_option(command, args, "give up after waiting D (default: wait forever)");
  command.add_flag("-n,--no-wait", args.no_wait, "give up at once if the lock is held");
  command.add_flag("-x,--exclusive")
    ->description("an exclusive lock (the default; for flock compatibility)");
  command.add_flag("-s,--shared", args.shared,
                   "a shared (read) lock: many shared holders, or one exclusive");
  command
    .add_option("--limit", args.limit, "a semaphore: up to N holders at once (same N for all)")
    ->type_name("N")
    ->check(CLI::Range(1, 1000000));
  command.add_flag("--fair", args.fair, "first come, first served among waiters");
  add_conflict_exit_code(command, args, "exit status when the lock is not obtained");
  command
    .add_option("--min-hold", args.min_hold,
                "keep the lock taken at least D from acquisition, even if released sooner "
                "(once per period)")
    ->type_name("D");
  command
    .add_option("--lock-delay", args.lock_delay,
                "if this lease ends without a release, the lock stays closed D more")
    ->type_name("D");
  command.add_flag("--replace", args.replace,
                   "take over: ask the holder to stop its command and release (it exits 76)");
  command.add_flag("--supersede", args.supersede,
                   "newest waiter wins: older --supersede waiters give up (conflict exit code)");
  command.add_option("--note", args.note, "why it is held (shown by status, list and conflicts)")
    ->type_name("TEXT");
  add_replica_options(
    command, args, "count the lock (and each renewal) only once N replicas have it (Redis WAIT)");
}

// The options before the subcommand; a config file may set them too.
void add_global_options(CLI::App& app, Arguments& args)
{
  app
    .add_option(
      "-u,--url", args.urls,
      "Lock store URL (default redis://127.0.0.1:6379): "
      "redis://[[user][:pass]@]host[:port][/db], rediss://... (TLS), unix:///path.sock[?db=N], "
      "redis-sentinel://host[:port][,host[:port]...][/db]#MASTER (rediss-sentinel://), "
      "postgres://[user@]host[:port]/db (a libpq URI; postgresql://), "
      "mysql://[user[:pass]@]host[:port]/db[?socket=/path] (or mariadb://), "
      "etcd://[user[:pass]@]host[:port][,host[:port]...] (etcds:// over TLS), "
      "zk://[user:pass@]host[:port][,host[:port]...][/chroot] (ZooKeeper), "
      "file:///directory (this host only); "
      "one per -u, several Redis URLs for Redlock; env DLOCK_URL (separated by blanks)")
    // One value per occurrence (the words after it are the command's), any number of them;
    // without expected(1) --help would also show "URL ...".
    ->allow_extra_args(false)
    ->expected(1)
    ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
    ->type_name("URL");
  app
    .add_option("--password-file", args.password_file,
                "read the store's password from FILE (or set DLOCK_PASSWORD)")
    ->type_name("FILE");
  app
    .add_option("--sentinel-password-file", args.sentinel_password_file,
                "read the Sentinels' own password from FILE (or set DLOCK_SENTINEL_PASSWORD)")
    ->type_name("FILE");
  app
    .add_option("--tls-ca", args.tls_ca,
                "CA bundle for rediss://, etcds://, postgres:// and mysql://")
    ->envname("DLOCK_TLS_CA")
    ->type_name("FILE");
  app
    .add_option("--tls-cert", args.tls_cert,
                "client certificate for rediss://, etcds://, postgres:// and mysql://")
    ->envname("DLOCK_TLS_CERT")
    ->type_name("FILE");
  app
    .add_option("--tls-key", args.tls_key,
                "client key for rediss://, etcds://, postgres:// and mysql://")
    ->envname("DLOCK_TLS_KEY")
    ->type_name("FILE");
  app
    .add_option("--tls-server-name", args.tls_server_name,
                "expected server name for rediss:// and etcds://")
    ->envname("DLOCK_TLS_SERVER_NAME")
    ->type_name("NAME");
  app.add_option("--prefix", args.prefix, "namespace of every key dlock writes")
    ->envname("DLOCK_PREFIX")
    ->capture_default_str();
  app.add_option("--connect-timeout", args.connect_timeout, "per connection attempt and request")
    ->envname("DLOCK_CONNECT_TIMEOUT")
    ->type_name("D")
    ->capture_default_str();
  app.add_flag("-v,--verbose", args.verbose, "more diagnostics on stderr")
    ->envname("DLOCK_VERBOSE");
  app.add_flag("-q,--quiet", args.quiet, "no diagnostics on stderr except errors")
    ->envname("DLOCK_QUIET");
  app
    .add_flag("--syslog", args.syslog,
              "also log acquisitions, skips, waits, losses and releases to syslog")
    ->envname("DLOCK_SYSLOG");
  app
    .add_option("--config", args.config,
                "read defaults from FILE only (default: /etc/dlock/dlock.conf, then "
                "~/.config/dlock/dlock.conf)")
    ->envname("DLOCK_CONFIG")
    ->type_name("FILE");
}

// run's own; a config file's [run] section may set them too.
void add_run_options(CLI::App& run, Arguments& args)
{
  add_key_option(run, args, "lock name (1 to 1024 bytes); repeat it to take several at once");
  run
    .add_option("-t,--ttl", args.ttl,
                "lease length, renewed while the command runs (default 30s, min 1s)")
    ->type_name("D");
  add_acquire_options(run, args);
  run.add_option("-c,--command", args.shell_command, "run STRING with /bin/sh -c")
    ->type_name("STRING");
  run.add_option("--on-lost", args.on_lost, "when the lease is lost: stop the command, or ignore")
    ->check(CLI::IsMember({"stop", "ignore"}))
    ->capture_default_str();
  run
    .add_option("--kill-after", args.kill_after,
                "grace between SIGTERM and SIGKILL (default ttl/4)")
    ->type_name("D");
  run.add_option("--max-hold", args.max_hold, "stop the command after D (exit 124)")
    ->type_name("D");
  run.add_flag("--export-password", args.export_password,
               "let the command see DLOCK_PASSWORD and a password in DLOCK_URL");
  run.add_flag("--record-command", args.record_command,
               "record the whole command line for status and list (default: the program's name)");
  run
    .add_option("--metrics-dir", args.metrics_dir,
                "write a Prometheus text file per key there (node_exporter's textfile collector)")
    ->envname("DLOCK_METRICS_DIR")
    ->type_name("DIR");
  run.add_option("command", args.command, "the command and its arguments, after --");
  run.positionals_at_end();
}

// elect's: run's, with the leader's proclamation and the campaign's end.
void add_elect_options(CLI::App& elect, Arguments& args)
{
  add_run_options(elect, args);
  // One name, one exclusive leader, candidates in the order they came: run's options against
  // that are still read (and refused with one line, or implied) but not offered.
  for (const char* refused : {"--exclusive", "--shared", "--limit", "--fair"}) {
    elect.get_option(refused)->group("");
  }
  elect.get_option("--key")->description("election (lock) name (1 to 1024 bytes)");
  elect
    .add_option("--value", args.value,
                "what the leader proclaims, shown by 'dlock leader' (default: user@host pid N)")
    ->type_name("TEXT");
  elect.add_flag("--keep-campaigning", args.keep_campaigning,
                 "after the command exits or leadership is lost, campaign again (until a signal)");
}

void add_leader_options(CLI::App& leader, Arguments& args)
{
  shown_required(leader.add_option("key", args.key, "election (lock) name"), "TEXT");
  leader.add_flag("--json", args.json, "one JSON document (one per change with --watch)");
  leader.add_flag("--watch", args.watch, "print a line at each change of leader, until a signal");
}

void add_history_options(CLI::App& history, Arguments& args)
{
  shown_required(history.add_option("key", args.key, "lock name"), "TEXT");
  history.add_flag("--json", args.json, "one JSON document");
  history.add_option("--limit", args.limit, "show the newest N events (default 20, at most 100)")
    ->type_name("N");
}

void add_status_options(CLI::App& status, Arguments& args)
{
  shown_required(status.add_option("key", args.key, "lock name"), "TEXT");
  status.add_flag("--json", args.json, "one JSON document");
}

void add_list_options(CLI::App& list, Arguments& args)
{
  list.add_option("pattern", args.pattern, "glob on lock names")->capture_default_str();
  list.add_flag("--json", args.json, "one JSON document (as --format json)");
  list
    .add_option("--format", args.format,
                "table (default), json, or prometheus (for node_exporter's textfile collector)")
    ->type_name("FORMAT");
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
  acquire
    .add_option("--while-pid", args.while_pid,
                "with --keep: hold while process PID lives (default: the calling script)")
    ->type_name("PID");
  acquire.add_option("--max-hold", args.max_hold, "with --keep: release after D")->type_name("D");
  acquire
    .add_option("--on-lost", args.keep_on_lost,
                "with --keep: signal:NAME sends NAME to the calling script if the lease is lost")
    ->type_name("signal:NAME");
}

void add_renew_options(CLI::App& renew, Arguments& args)
{
  add_key_option(renew, args, "lock name; repeat it for each key acquire took");
  renew.add_option("--token", args.token,
                   "the token acquire printed (required, or set DLOCK_TOKEN)");
  renew
    .add_option("-t,--ttl", args.ttl,
                "new lease length (default: the last one set by acquire or renew --ttl)")
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
  add_wait_option(wait, args, "give up after waiting D (default: wait forever)");
  add_conflict_exit_code(wait, args, "exit status when --wait runs out");
}

void add_barrier_options(CLI::App& barrier, Arguments& args)
{
  add_key_option(barrier, args, "barrier name");
  shown_required(barrier.add_option("--parties", args.parties,
                                    "how many callers make the barrier trip (same N for all)"),
                 "N")
    ->check(CLI::Range(1, 1000000));
  add_wait_option(barrier, args,
                  "give up after waiting D, withdrawing the arrival (default: wait forever)");
  add_conflict_exit_code(barrier, args, "exit status when --wait runs out");
}

void add_latch_options(CLI::App& latch, Arguments& args)
{
  add_key_option(latch, args, "latch name");
  latch.add_option("--count", args.latch_count, "set the latch to N (again)")
    ->type_name("N")
    ->check(CLI::Range(0LL, 1000000000LL));
  latch.add_flag("--down", args.latch_down, "count the latch down by one");
  latch
    .add_option("-w,--wait", args.wait, "block until the count is zero; give up after D if given")
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
                         const std::string& description, void (*add_options)(CLI::App&, Arguments&))
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
  sub.run =
    add_subcommand(app, args, "run", "run a command while holding the lock", add_run_options);
  sub.status = add_subcommand(app, args, "status", "show who holds a lock (exit 0 held, 1 free)",
                              add_status_options);
  sub.list =
    add_subcommand(app, args, "list", "list held locks under the prefix", add_list_options);
  sub.acquire =
    add_subcommand(app, args, "acquire", "take a lock for several steps; print its token",
                   add_acquire_command_options);
  sub.renew = add_subcommand(app, args, "renew", "extend a lease held by a token (76 if not held)",
                             add_renew_options);
  sub.release = add_subcommand(app, args, "release", "release a lock by token, or --force",
                               add_release_options);
  sub.wait = add_subcommand(app, args, "wait", "block until a lock is free; take nothing",
                            add_wait_free_options);
  sub.barrier =
    add_subcommand(app, args, "barrier", "block until N callers have arrived", add_barrier_options);
  sub.latch = add_subcommand(app, args, "latch", "set, count down or wait for a count-down latch",
                             add_latch_options);
  sub.elect = add_subcommand(
    app, args, "elect", "campaign for leadership; run a command while leader", add_elect_options);
  sub.leader = add_subcommand(app, args, "leader", "show who leads (exit 0 a leader, 1 none)",
                              add_leader_options);
  sub.history = add_subcommand(app, args, "history", "show a lock's last events, newest first",
                               add_history_options);
  return sub;
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
  // elect is run for a campaign: run's section holds its defaults too
  CLI::App* run_like = sub.run->parsed() ? sub.run : sub.elect->parsed() ? sub.elect : nullptr;
  apply_config(files, {{"", &app}, {"run", run_like}});
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

} // namespace dlock::cli
