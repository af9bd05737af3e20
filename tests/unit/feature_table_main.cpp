// dlock_feature_table: prints the feature × store table of src/lock/features.cpp as README.md
// and the man page show it; with --write DIR, writes it into DIR/README.md and DIR/man/dlock.1
// between their markers.
#include "feature_table.hpp"

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

namespace {

bool rewrite(const std::string& path, const std::string& block, bool man)
{
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string updated = dlock::test::with_block(text.str(), block, man);
  if (dlock::test::generated_block(text.str(), man).empty()) {
    std::cerr << path << ": no feature table markers\n";
    return false;
  }
  std::ofstream(path, std::ios::trunc) << updated;
  return true;
}

} // namespace

int main(int argc, char** argv)
{
  if (argc == 3 && std::string(argv[1]) == "--write") {
    std::string dir = argv[2];
    bool ok = rewrite(dir + "/README.md", dlock::test::markdown_feature_table(), false);
    ok = rewrite(dir + "/man/dlock.1", dlock::test::man_feature_table(), true) && ok;
    return ok ? 0 : 1;
  }
  std::cout << dlock::test::markdown_feature_table() << '\n' << dlock::test::man_feature_table();
  return 0;
}
