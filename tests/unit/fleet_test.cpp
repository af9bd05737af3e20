// What running in a fleet rests on: config files read with their lines, precedence of the
// files, syslog event lines that split one way, metrics file names that never collide, and the
// Prometheus text they are written in (escaping in one place).
#include "cli/config_file.hpp"
#include "commands/metrics_file.hpp"
#include "util/error.hpp"
#include "util/syslog.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

namespace {

using dlock::cli::ConfigFile;
using dlock::cli::read_config_file;

// The directory of this test binary's files, removed when it ends.
struct TestDirectory {
  std::filesystem::path path =
    std::filesystem::temp_directory_path() / ("dlock-fleet-test-" + std::to_string(::getpid()));
  ~TestDirectory()
  {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
} test_directory;

// A config file with the given text, in the test's own directory.
std::string write_file(const std::string& name, const std::string& text)
{
  const std::filesystem::path& dir = test_directory.path;
  std::filesystem::create_directories(dir);
  std::string path = (dir / name).string();
  std::ofstream(path) << text;
  std::filesystem::permissions(path, std::filesystem::perms::owner_read
                                       | std::filesystem::perms::owner_write);
  return path;
}

TEST(ConfigFile, SettingsWithTheirLinesSectionsAndComments)
{
  std::string path =
    write_file("a.conf", "# top\n"
                         "url = \"redis-sentinel://a:1,b:2/0#mymaster\"  # a comment\n"
                         "\n"
                         "prefix = 'x:' ; not a comment\n"
                         "[run]\n"
                         "ttl = 10s\n"
                         "no-wait = true\n");
  ConfigFile file = read_config_file(path);
  ASSERT_EQ(file.settings.size(), 4U);
  EXPECT_EQ(file.settings[0].name, "url");
  ASSERT_EQ(file.settings[0].values.size(), 1U);
  EXPECT_EQ(file.settings[0].values[0], "redis-sentinel://a:1,b:2/0#mymaster");
  EXPECT_EQ(file.settings[0].where, path + ":2");
  EXPECT_EQ(file.settings[1].where, path + ":4");
  EXPECT_EQ(file.settings[2].section, "run");
  EXPECT_EQ(file.settings[2].name, "ttl");
  EXPECT_EQ(file.settings[2].where, path + ":6");
  EXPECT_EQ(file.settings[3].values.at(0), "true");
}

TEST(ConfigFile, ArraysGiveSeveralValues)
{
  ConfigFile file =
    read_config_file(write_file("b.conf", "url = [\"redis://a\", \"redis://b\"]\n"));
  ASSERT_EQ(file.settings.size(), 1U);
  EXPECT_EQ(file.settings[0].values, (std::vector<std::string>{"redis://a", "redis://b"}));
}

TEST(ConfigFile, MissingOrDirectoryIsAConfigurationError)
{
  try {
    read_config_file("/nonexistent/dlock.conf");
    FAIL() << "no error";
  } catch (const dlock::Error& error) {
    EXPECT_EQ(error.code(), dlock::ExitCode::config);
  }
  EXPECT_THROW(read_config_file(std::filesystem::temp_directory_path().string()), dlock::Error);
}

TEST(ConfigFile, ApplyNamesTheLineOfAnUnknownSettingAndLeavesGivenOptionsAlone)
{
  CLI::App app;
  std::string prefix = "dlock:";
  app.add_option("--prefix", prefix);
  CLI::App* run = app.add_subcommand("run");
  std::string ttl;
  run->add_option("--ttl", ttl)->type_name("D");
  app.parse(std::vector<std::string>{});
  ConfigFile user = read_config_file(write_file("user.conf", "prefix = user:\n[run]\nttl = 12s\n"));
  ConfigFile system =
    read_config_file(write_file("system.conf", "prefix = system:\n[run]\nttl = 11s\n"));
  dlock::cli::apply_config({user, system}, {{"", &app}, {"run", run}});
  EXPECT_EQ(prefix, "user:");
  EXPECT_EQ(ttl, "12s");

  ConfigFile bad = read_config_file(write_file("bad.conf", "\n[run]\nttl = 1s\ncolour = red\n"));
  try {
    dlock::cli::apply_config({bad}, {{"", &app}, {"run", run}});
    FAIL() << "no error";
  } catch (const dlock::Error& error) {
    EXPECT_EQ(error.code(), dlock::ExitCode::config);
    EXPECT_NE(std::string(error.what()).find("bad.conf:4: 'colour' is not an option"),
              std::string::npos)
      << error.what();
  }
  ConfigFile bad_duration = read_config_file(write_file("d.conf", "[run]\nttl = soon\n"));
  CLI::App fresh;
  CLI::App* fresh_run = fresh.add_subcommand("run");
  fresh_run->add_option("--ttl", ttl)->type_name("D");
  EXPECT_THROW(dlock::cli::apply_config({bad_duration}, {{"", &fresh}, {"run", fresh_run}}),
               dlock::Error);
}

TEST(SyslogEvent, ValuesWithBlanksQuotesOrNothingAreQuoted)
{
  EXPECT_EQ(dlock::util::event_line("acquired", {{"key", "report"}, {"fencing_token", "42"}}),
            "event=acquired key=report fencing_token=42");
  EXPECT_EQ(
    dlock::util::event_line("skipped", {{"held_by", "a b \"c\" d\\e"}, {"x", ""}, {"y", "k=v"}}),
    "event=skipped held_by=\"a b \\\"c\\\" d\\\\e\" x=\"\" y=\"k=v\"");
  EXPECT_EQ(dlock::util::event_line("lost", {{"reason", "one\ntwo"}}),
            "event=lost reason=\"one two\"");
}

TEST(MetricsFile, NamesAreSafeAndDistinct)
{
  using dlock::commands::metrics_file_name;
  using dlock::lock::LockName;
  EXPECT_EQ(metrics_file_name(LockName::parse("nightly-report.v2")),
            "dlock_nightly-report.v2.prom");
  std::string odd = metrics_file_name(LockName::parse("a/b"));
  EXPECT_TRUE(odd.starts_with("dlock_a_b-")) << odd;
  EXPECT_NE(odd, metrics_file_name(LockName::parse("a b")));
  EXPECT_NE(odd, metrics_file_name(LockName::parse("a_b")));
  EXPECT_LE(metrics_file_name(LockName::parse(std::string(1000, 'k'))).size(), 130U);
}

TEST(PrometheusText, EscapesLabelsAndHelpAndLeavesEmptyFamiliesOut)
{
  using dlock::commands::PrometheusText;
  EXPECT_EQ(PrometheusText::label_value("a\"b\\c}d\ne \xc3\xa9"), "a\\\"b\\\\c}d\\ne \xc3\xa9");
  // a byte that is not UTF-8 (here a cut two-byte character) becomes U+FFFD
  EXPECT_EQ(PrometheusText::label_value("x\xffy\xc3"), "x\xef\xbf\xbdy\xef\xbf\xbd");
  EXPECT_EQ(PrometheusText::series("m", "key=\"k\""), "m{key=\"k\"}");
  PrometheusText text;
  text.family("empty", "gauge", "no sample: no lines");
  text.family("m", "gauge", "a \\ and a\nnewline");
  text.sample("m{key=\"a\"}", "1");
  text.sample("m{key=\"b\"}", "0.250");
  text.comment("note");
  EXPECT_EQ(text.str(), "# HELP m a \\\\ and a\\nnewline\n# TYPE m gauge\nm{key=\"a\"} 1\n"
                        "m{key=\"b\"} 0.250\n# note\n");
}

} // namespace
