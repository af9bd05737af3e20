#pragma once

#include <cstddef>
#include <string>
#include <string_view>

// HTTP/1.1 as etcd's JSON gateway speaks it over plain TCP (etcd://): the request text and an
// answer decoder, with no I/O, so that they are unit-tested. libcurl serves etcds:// only: for
// http:// its loading (30 libraries with OpenSSL, GnuTLS, Kerberos, LDAP) cost 3.7 ms of CPU
// and 8 MB of memory per run, a third of a lock cycle, for a POST and a chunked stream.
namespace dlock::etcd::http1 {

// A POST of a JSON body to path on host ("127.0.0.1:2379"), with an Authorization header
// when authorization is not empty; no Expect header (no 100-continue round trip).
std::string post_request(std::string_view host, std::string_view path, std::string_view body,
                         std::string_view authorization);

// Decodes one answer as its bytes arrive: the status line and headers, then the body by its
// Content-Length, by chunks (a watch's stream), or up to the end of the connection.
class AnswerDecoder {
public:
  enum class State {
    more, // needs more bytes
    done, // the whole answer was decoded
    bad,  // not an HTTP/1.1 answer, or a header past max_head_bytes
  };
  // The most of a status line and headers read before the answer is called bad.
  static constexpr std::size_t max_head_bytes = 64 * 1024;

  // Takes what it can of in (leaving bytes of a later answer there), appending body bytes to
  // body; the caller caps body's size.
  State feed(std::string& in, std::string& body);
  // The connection ended: done when the body runs to the end of the connection, else bad.
  State end_of_input() const;

  long status() const { return m_status; }
  // Whether the connection may carry another request after this answer.
  bool reusable() const { return m_keep_alive && !m_until_close; }
  // Whether any byte of the answer arrived (a kept connection the server had closed has none).
  bool started() const { return m_started; }

private:
  enum class Stage { head, body, chunk_size, chunk_data, chunk_end, trailer, done };
  // Reads the status line and headers when in holds them whole (erasing them): more, or bad.
  State head(std::string& in);

  Stage m_stage = Stage::head;
  long m_status = 0;
  std::size_t m_left = 0; // of the body (Content-Length) or of the current chunk
  bool m_until_close = false;
  bool m_keep_alive = true;
  bool m_started = false;
};

} // namespace dlock::etcd::http1
