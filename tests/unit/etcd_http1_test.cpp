#include "stores/etcd/http1.hpp"

#include <gtest/gtest.h>

using namespace dlock::etcd::http1;
using State = AnswerDecoder::State;

TEST(EtcdHttp1, PostCarriesLengthAndTokenAndNoExpect)
{
  std::string request = post_request("127.0.0.1:2379", "/v3/kv/txn", "{}", "tok");
  EXPECT_EQ(request, "POST /v3/kv/txn HTTP/1.1\r\nHost: 127.0.0.1:2379\r\nContent-Type: "
                     "application/json\r\nContent-Length: 2\r\nAuthorization: tok\r\n\r\n{}");
  EXPECT_EQ(post_request("h:1", "/p", "", "").find("Authorization"), std::string::npos);
}

TEST(EtcdHttp1, ContentLengthAnswerInPiecesLeavesTheNextAnswer)
{
  AnswerDecoder decoder;
  std::string in = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Le";
  std::string body;
  EXPECT_FALSE(decoder.started());
  EXPECT_EQ(decoder.feed(in, body), State::more);
  EXPECT_TRUE(decoder.started());
  in += "ngth:  5\r\n\r\n{\"a\"";
  EXPECT_EQ(decoder.feed(in, body), State::more);
  in += "}HTTP/1.1";
  EXPECT_EQ(decoder.feed(in, body), State::done);
  EXPECT_EQ(body, "{\"a\"}");
  EXPECT_EQ(in, "HTTP/1.1");
  EXPECT_EQ(decoder.status(), 200);
  EXPECT_TRUE(decoder.reusable());
}

TEST(EtcdHttp1, ChunkedStreamDecodesChunksAndTrailer)
{
  AnswerDecoder decoder;
  std::string in = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;x=y\r\n{\"r\"\r\n";
  std::string body;
  EXPECT_EQ(decoder.feed(in, body), State::more);
  EXPECT_EQ(body, "{\"r\"");
  in += "3\r\n:1}\r\n1";
  EXPECT_EQ(decoder.feed(in, body), State::more);
  in += "\r\n\n\r\n0\r\nX-T: 1\r\n\r\n";
  EXPECT_EQ(decoder.feed(in, body), State::done);
  EXPECT_EQ(body, "{\"r\":1}\n");
  EXPECT_TRUE(in.empty());
}

TEST(EtcdHttp1, ContinueIsSkippedCloseIsNotReusedEndOfInputEndsABodyWithoutLength)
{
  AnswerDecoder decoder;
  std::string in = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nConnection: close\r\n"
                   "\r\nnot found";
  std::string body;
  EXPECT_EQ(decoder.feed(in, body), State::more);
  EXPECT_EQ(decoder.status(), 404);
  EXPECT_EQ(body, "not found");
  EXPECT_FALSE(decoder.reusable());
  EXPECT_EQ(decoder.end_of_input(), State::done);
  AnswerDecoder cut;
  std::string part = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}";
  EXPECT_EQ(cut.feed(part, body), State::more);
  EXPECT_EQ(cut.end_of_input(), State::bad);
}

TEST(EtcdHttp1, WhatIsNotHttpIsBad)
{
  for (std::string in :
       {std::string("SSH-2.0-OpenSSH\r\n\r\n"), std::string("HTTP/1.1 2x0 OK\r\n\r\n"),
        std::string("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"),
        std::string("HTTP/1.1 200 OK\r\nno colon\r\n\r\n"),
        std::string("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
        std::string(AnswerDecoder::max_head_bytes + 1, 'x')}) {
    AnswerDecoder decoder;
    std::string body;
    EXPECT_EQ(decoder.feed(in, body), State::bad) << in.substr(0, 40);
  }
}
