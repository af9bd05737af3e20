#include "feature_table.hpp"

#include "lock/features.hpp"

#include <fmt/format.h>

#include <map>
#include <string_view>
#include <vector>

namespace dlock::test {

using lock::Feature;
using lock::StoreKind;

namespace {

constexpr std::string_view md_begin =
  "<!-- BEGIN feature table: generated from src/lock/features.cpp by "
  "build/tests/dlock_feature_table --write; do not edit -->\n";
constexpr std::string_view md_end = "<!-- END feature table -->\n";
constexpr std::string_view man_begin =
  ".\\\" BEGIN feature table: generated from src/lock/features.cpp by "
  "build/tests/dlock_feature_table --write; do not edit\n";
constexpr std::string_view man_end = ".\\\" END feature table\n";

// The columns, in the order users compare them: Redis in each of its forms first.
const StoreKind columns[] = {StoreKind::redis, StoreKind::redlock, StoreKind::postgres,
                             StoreKind::mysql, StoreKind::etcd,    StoreKind::zookeeper,
                             StoreKind::file};

bool has(StoreKind kind, Feature feature) { return lock::features_of(kind).has(feature); }

// roff text: a hyphen is \-, which a terminal shows as the ASCII one options are typed with.
std::string roff(std::string_view text)
{
  std::string out;
  for (char c : text) {
    out += c == '-' ? std::string("\\-") : std::string(1, c);
  }
  return out;
}

std::string short_name(StoreKind kind)
{
  switch (kind) {
  case StoreKind::redis:
    return "redis";
  case StoreKind::postgres:
    return "postgres";
  case StoreKind::mysql:
    return "mysql";
  case StoreKind::zookeeper:
    return "zk";
  case StoreKind::file:
    return "file";
  default:
    return std::string(lock::store_label(kind));
  }
}

} // namespace

std::string markdown_feature_table()
{
  std::string out(md_begin);
  out += "| feature |";
  for (StoreKind kind : columns) {
    out += fmt::format(" {} |", lock::store_label(kind));
  }
  out += "\n|---|";
  for (std::size_t i = 0; i < std::size(columns); ++i) {
    out += "---|";
  }
  out += "\n";
  std::vector<std::string_view> reasons;
  std::map<std::string_view, std::vector<std::string>> who; // reason -> "Redlock: --fair"
  for (Feature feature : lock::every_feature()) {
    out += fmt::format("| `{}` |", lock::feature_label(feature));
    for (StoreKind kind : columns) {
      if (has(kind, feature)) {
        out += " ✅ |";
        continue;
      }
      std::string_view why = lock::why_not(kind, feature);
      std::size_t n = 0;
      while (n < reasons.size() && reasons[n] != why) {
        ++n;
      }
      if (n == reasons.size()) {
        reasons.push_back(why);
      }
      out += fmt::format(" ❌ ({}) |", n + 1);
    }
    out += "\n";
  }
  out += "\n";
  for (std::size_t n = 0; n < reasons.size(); ++n) {
    out += fmt::format("{}. {}\n", n + 1, reasons[n].empty() ? "(no reason given)" : reasons[n]);
  }
  out += md_end;
  return out;
}

std::string man_feature_table()
{
  std::string out(man_begin);
  out += ".PP\n.nf\n";
  std::string line = fmt::format("{:<20}", "feature");
  for (StoreKind kind : columns) {
    line += fmt::format("{:<{}}", short_name(kind),
                        std::max<std::size_t>(short_name(kind).size(), 3) + 2);
  }
  while (!line.empty() && line.back() == ' ') {
    line.pop_back();
  }
  out += line + "\n";
  for (Feature feature : lock::every_feature()) {
    std::string label(lock::feature_label(feature));
    line = roff(label) + std::string(label.size() < 20 ? 20 - label.size() : 1, ' ');
    for (StoreKind kind : columns) {
      line += fmt::format("{:<{}}", has(kind, feature) ? "yes" : "no",
                          std::max<std::size_t>(short_name(kind).size(), 3) + 2);
    }
    while (!line.empty() && line.back() == ' ') {
      line.pop_back();
    }
    out += line + "\n";
  }
  out +=
    ".fi\n.PP\nWhere a store says no, the store makes the feature impossible to do correctly:\n";
  for (StoreKind kind : columns) {
    std::vector<std::pair<std::string_view, std::vector<Feature>>> groups;
    for (Feature feature : lock::every_feature()) {
      if (has(kind, feature)) {
        continue;
      }
      std::string_view why = lock::why_not(kind, feature);
      auto group = groups.begin();
      while (group != groups.end() && group->first != why) {
        ++group;
      }
      if (group == groups.end()) {
        groups.push_back({why, {feature}});
      } else {
        group->second.push_back(feature);
      }
    }
    for (const auto& [why, features] : groups) {
      std::string names;
      for (Feature feature : features) {
        names += (names.empty() ? "" : ", ") + std::string(lock::feature_label(feature));
      }
      out += fmt::format(".TP\n{}: {}\n{}.\n", short_name(kind), roff(names),
                         roff(why.empty() ? "(no reason given)" : why));
    }
  }
  out += man_end;
  return out;
}

std::string generated_block(const std::string& text, bool man)
{
  std::string_view begin = man ? man_begin : md_begin;
  std::string_view end = man ? man_end : md_end;
  std::size_t from = text.find(begin);
  std::size_t to = text.find(end, from == std::string::npos ? 0 : from);
  if (from == std::string::npos || to == std::string::npos) {
    return {};
  }
  return text.substr(from, to + end.size() - from);
}

std::string with_block(const std::string& text, const std::string& block, bool man)
{
  std::string old = generated_block(text, man);
  if (old.empty()) {
    return text;
  }
  std::size_t at = text.find(old);
  return text.substr(0, at) + block + text.substr(at + old.size());
}

} // namespace dlock::test
