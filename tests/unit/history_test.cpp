// The history event text: what stores keep as it is and dlock history reads back.
#include "lock/history.hpp"

#include <gtest/gtest.h>

using dlock::lock::decode_event;
using dlock::lock::encode_event;
using dlock::lock::HistoryEvent;

namespace {

HistoryEvent sample()
{
  HistoryEvent event;
  event.kind = HistoryEvent::Kind::lost;
  event.at_ms = 1'764'000'000'123;
  event.holder.user = "deploy";
  event.holder.host = "web-1";
  event.holder.pid = 4242;
  event.holder.fence = 17;
  event.holder.note = "nightly report: 100% = done";
  event.held_ms = 2500;
  event.exit_status = 76;
  event.detail = "the lease expired\nor was released";
  return event;
}

} // namespace

TEST(HistoryEvent, RoundTripsAsOneLineWithoutBlanksOrControlCharacters)
{
  std::string text = encode_event(sample());
  EXPECT_TRUE(text.starts_with("v1 event=lost "));
  for (char c : text) {
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << text;
  }
  EXPECT_EQ(text.find('\n'), std::string::npos);
  std::optional<HistoryEvent> back = decode_event(text);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->kind, HistoryEvent::Kind::lost);
  EXPECT_EQ(back->at_ms, 1'764'000'000'123);
  EXPECT_EQ(back->holder.user, "deploy");
  EXPECT_EQ(back->holder.host, "web-1");
  EXPECT_EQ(back->holder.pid, 4242);
  EXPECT_EQ(back->holder.fence, 17);
  EXPECT_EQ(back->holder.note, "nightly report: 100% = done");
  EXPECT_EQ(back->waited_ms, -1);
  EXPECT_EQ(back->held_ms, 2500);
  EXPECT_EQ(back->exit_status, 76);
  EXPECT_EQ(back->detail, "the lease expired\nor was released");
}

TEST(HistoryEvent, NeverRecordsTheCommandLine)
{
  HistoryEvent event = HistoryEvent::now(HistoryEvent::Kind::acquired,
                                         dlock::lock::HolderInfo::current("deploy --password x"));
  EXPECT_TRUE(event.holder.command.empty());
  EXPECT_EQ(encode_event(event).find("password"), std::string::npos);
  EXPECT_GT(event.at_ms, 0);
}

TEST(HistoryEvent, WhatDlockCouldNotHaveWrittenIsRefused)
{
  std::string good = encode_event(sample());
  EXPECT_FALSE(decode_event(""));
  EXPECT_FALSE(decode_event("v2 event=lost"));
  EXPECT_FALSE(decode_event("v1"));                                    // no kind
  EXPECT_FALSE(decode_event("v1 event=exploded"));                     // an unknown kind
  EXPECT_FALSE(decode_event("v1 event=lost pid=-3"));                  // not a number dlock writes
  EXPECT_FALSE(decode_event("v1 event=lost pid=1e3"));                 //
  EXPECT_FALSE(decode_event("v1 event=lost note=%4"));                 // a cut escape
  EXPECT_FALSE(decode_event("v1 event=lost note=%zz"));                // not hex
  EXPECT_FALSE(decode_event("v1 event=lost  pid=1"));                  // an empty field
  EXPECT_FALSE(decode_event("v1event=lost"));                          //
  EXPECT_FALSE(decode_event(good + " user=" + std::string(300, 'u'))); // a field too long
  EXPECT_FALSE(decode_event("v1 event=lost detail=" + std::string(5000, 'd'))); // too large
  EXPECT_TRUE(decode_event(good + " later=field")); // a later version's field is skipped
}

TEST(HistoryEvent, ALongNoteAndDetailStayWithinTheCap)
{
  HistoryEvent event = sample();
  event.holder.note = std::string(dlock::lock::max_note_bytes, '\x01'); // escaped: 3 bytes each
  event.detail = std::string(2000, ' ');
  std::string text = encode_event(event);
  EXPECT_LE(text.size(), dlock::lock::max_event_bytes);
  std::optional<HistoryEvent> back = decode_event(text);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->held_ms, 2500);
  EXPECT_LE(back->detail.size(), dlock::lock::max_event_detail_bytes);
}
