#include "util/files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <string>
#include <vector>

using dlock::util::directory_entries;
using dlock::util::open_directory;
using dlock::util::open_or_create_regular_at;
using dlock::util::open_regular_at;
using dlock::util::read_bounded;
using dlock::util::replace_file_at;
using dlock::util::untrusted_because;

namespace {

// A fresh directory under the test's temporary directory, removed afterwards.
class FilesTest : public ::testing::Test {
protected:
  void SetUp() override
  {
    std::string pattern = (std::filesystem::temp_directory_path() / "dlock-files-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    m_path = pattern;
    m_dir = open_directory(m_path);
    ASSERT_TRUE(m_dir);
  }
  void TearDown() override { std::filesystem::remove_all(m_path); }

  std::string path(const std::string& name) const { return m_path + "/" + name; }
  static std::string contents(const std::string& file)
  {
    std::ifstream in(file);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::string m_path;
  dlock::util::UniqueFd m_dir;
};

} // namespace

TEST_F(FilesTest, ASymlinkIsNotFollowed)
{
  std::ofstream(path("target")) << "secret";
  ASSERT_EQ(::symlink(path("target").c_str(), path("link").c_str()), 0);
  errno = 0;
  EXPECT_FALSE(open_regular_at(m_dir.get(), "link", O_RDWR | O_CREAT));
  EXPECT_EQ(errno, ELOOP);
  EXPECT_EQ(contents(path("target")), "secret");
}

TEST_F(FilesTest, AFifoIsRefusedWithoutBlocking)
{
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0666), 0);
  errno = 0;
  EXPECT_FALSE(open_regular_at(m_dir.get(), "fifo", O_RDONLY));
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(FilesTest, ADirectoryIsNotARegularFile)
{
  ASSERT_EQ(::mkdir(path("sub").c_str(), 0700), 0);
  EXPECT_FALSE(open_regular_at(m_dir.get(), "sub", O_RDONLY));
}

TEST_F(FilesTest, ASecondHardLinkIsRefusedWhenAsked)
{
  std::ofstream(path("file")) << "x";
  ASSERT_EQ(::link(path("file").c_str(), path("other").c_str()), 0);
  EXPECT_TRUE(open_regular_at(m_dir.get(), "file", O_RDONLY));
  errno = 0;
  EXPECT_FALSE(open_regular_at(m_dir.get(), "file", O_RDONLY, 0600, true));
  EXPECT_EQ(errno, EMLINK);
}

TEST_F(FilesTest, AnOpenedFileBlocksAgain)
{
  dlock::util::UniqueFd fd = open_regular_at(m_dir.get(), "new", O_RDWR | O_CREAT, 0640);
  ASSERT_TRUE(fd);
  EXPECT_EQ(::fcntl(fd.get(), F_GETFL) & O_NONBLOCK, 0);
  EXPECT_NE(::fcntl(fd.get(), F_GETFD) & FD_CLOEXEC, 0);
}

TEST_F(FilesTest, ReadingStopsAtTheLimit)
{
  std::ofstream(path("big")) << std::string(5000, 'a');
  dlock::util::UniqueFd fd = open_regular_at(m_dir.get(), "big", O_RDONLY);
  ASSERT_TRUE(fd);
  EXPECT_EQ(read_bounded(fd.get(), 5000).value_or(""), std::string(5000, 'a'));
  EXPECT_FALSE(read_bounded(fd.get(), 4999));
}

TEST_F(FilesTest, ReplacingASymlinkReplacesTheLinkNotItsTarget)
{
  std::ofstream(path("target")) << "keep";
  ASSERT_EQ(::symlink(path("target").c_str(), path("metrics.prom").c_str()), 0);
  ASSERT_EQ(replace_file_at(m_dir.get(), "metrics.prom", "new\n", 0644), 0);
  EXPECT_EQ(contents(path("target")), "keep");
  EXPECT_EQ(contents(path("metrics.prom")), "new\n");
  struct stat st {};
  ASSERT_EQ(::lstat(path("metrics.prom").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  // nothing left aside
  int entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(m_path)) {
    ++entries;
  }
  EXPECT_EQ(entries, 2);
}

TEST_F(FilesTest, AFileIsCreatedOnlyIfMissingAndNeverThroughALink)
{
  std::ofstream(path("there")) << "kept";
  dlock::util::UniqueFd fd =
    open_or_create_regular_at(m_dir.get(), "there", O_RDONLY | O_CREAT, 0600);
  ASSERT_TRUE(fd);
  EXPECT_EQ(read_bounded(fd.get(), 100).value_or(""), "kept");
  EXPECT_TRUE(open_or_create_regular_at(m_dir.get(), "new", O_RDONLY, 0600));
  struct stat st {};
  ASSERT_EQ(::stat(path("new").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::symlink(path("elsewhere").c_str(), path("link").c_str()), 0);
  errno = 0;
  EXPECT_FALSE(open_or_create_regular_at(m_dir.get(), "link", O_RDONLY));
  EXPECT_EQ(errno, ELOOP);
  EXPECT_NE(::access(path("elsewhere").c_str(), F_OK), 0);
}

TEST_F(FilesTest, EntriesAreListedSortedWithoutDots)
{
  std::ofstream(path("b")) << "";
  std::ofstream(path("a")) << "";
  EXPECT_EQ(directory_entries(m_dir.get()), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(directory_entries(m_dir.get()), (std::vector<std::string>{"a", "b"})); // again
}

TEST(Files, TrustFollowsSsh)
{
  struct stat st {};
  st.st_uid = ::getuid();
  st.st_mode = S_IFREG | 0644;
  EXPECT_FALSE(untrusted_because(st));
  st.st_mode = S_IFREG | 0664;
  EXPECT_TRUE(untrusted_because(st));
  st.st_mode = S_IFREG | 0646;
  EXPECT_TRUE(untrusted_because(st));
  st.st_mode = S_IFDIR | 01777;
  EXPECT_FALSE(untrusted_because(st)); // /tmp
  st.st_mode = S_IFDIR | 0777;
  EXPECT_TRUE(untrusted_because(st));
  st.st_mode = S_IFDIR | 0775;
  EXPECT_TRUE(untrusted_because(st));
  EXPECT_FALSE(untrusted_because(st, true)); // a team's directory, for the lock files
  st.st_mode = S_IFDIR | 0777;
  EXPECT_TRUE(untrusted_because(st, true));
  st.st_mode = S_IFREG | 0600;
  st.st_uid = ::getuid() + 1;
  EXPECT_EQ(untrusted_because(st).has_value(), st.st_uid != 0);
  st.st_uid = 0;
  EXPECT_FALSE(untrusted_because(st));
}
