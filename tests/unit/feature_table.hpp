#pragma once

#include <string>

// The feature × store table of src/lock/features.cpp, as README.md and the man page show it:
// written there by dlock_feature_table --write, checked there by features_test.
namespace dlock::test {

// README.md's table (Markdown): ✅, or ❌ with the number of its reason, listed below it.
std::string markdown_feature_table();
// The man page's table (roff): yes or no, and what makes each no impossible, below it.
std::string man_feature_table();
// The generated block of text between its markers (the markers' lines included, as
// lines): "" if the markers are not there.
std::string generated_block(const std::string& text, bool man);
// text with its generated block replaced by block; text unchanged if it has no markers.
std::string with_block(const std::string& text, const std::string& block, bool man);

} // namespace dlock::test
