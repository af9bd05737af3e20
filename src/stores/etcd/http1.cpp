#include "stores/etcd/http1.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>

namespace dlock::etcd::http1 {

namespace {

std::string lower(std::string_view text)
{
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view trimmed(std::string_view text)
{
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) {
    text.remove_prefix(1);
  }
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) {
    text.remove_suffix(1);
  }
  return text;
}

// A whole unsigned number in base (no sign, no space), or false.
bool parse_size(std::string_view text, int base, std::size_t& value)
{
  if (text.empty()) {
    return false;
  }
  std::uint64_t parsed = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), parsed, base);
  if (error != std::errc{} || end != text.data() + text.size()) {
    return false;
  }
  value = static_cast<std::size_t>(parsed);
  return true;
}

} // namespace

std::string post_request(std::string_view host, std::string_view path, std::string_view body,
                         std::string_view authorization)
{
  std::string request = fmt::format("POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: "
                                    "application/json\r\nContent-Length: {}\r\n",
                                    path, host, body.size());
  if (!authorization.empty()) {
    request += fmt::format("Authorization: {}\r\n", authorization);
  }
  request += "\r\n";
  request += body;
  return request;
}

AnswerDecoder::State AnswerDecoder::head(std::string& in)
{
  std::size_t end = in.find("\r\n\r\n");
  if (end == std::string::npos) {
    return in.size() > max_head_bytes ? State::bad : State::more;
  }
  if (end > max_head_bytes) {
    return State::bad;
  }
  std::string_view text(in.data(), end + 2);
  std::size_t line_end = text.find("\r\n");
  std::string_view status_line = text.substr(0, line_end);
  // "HTTP/1.1 200 OK"
  if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12 || status_line[8] != ' ') {
    return State::bad;
  }
  std::size_t status = 0;
  if (!parse_size(status_line.substr(9, 3), 10, status) || status < 100 || status > 999) {
    return State::bad;
  }
  bool http10 = status_line[7] == '0';
  m_keep_alive = !http10;
  bool chunked = false;
  std::size_t length = 0;
  bool has_length = false;
  for (std::size_t at = line_end + 2; at < text.size();) {
    std::size_t next = text.find("\r\n", at);
    std::string_view line = text.substr(at, next - at);
    at = next + 2;
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) {
      return State::bad;
    }
    std::string name = lower(trimmed(line.substr(0, colon)));
    std::string value = lower(trimmed(line.substr(colon + 1)));
    if (name == "content-length") {
      if (!parse_size(value, 10, length)) {
        return State::bad;
      }
      has_length = true;
    } else if (name == "transfer-encoding") {
      chunked = value.find("chunked") != std::string::npos;
    } else if (name == "connection") {
      if (value.find("close") != std::string::npos) {
        m_keep_alive = false;
      } else if (value.find("keep-alive") != std::string::npos) {
        m_keep_alive = true;
      }
    }
  }
  in.erase(0, end + 4);
  if (status < 200) { // 100 Continue and the like: the answer proper follows
    return State::more;
  }
  m_status = static_cast<long>(status);
  if (chunked) {
    m_stage = Stage::chunk_size;
  } else if (has_length) {
    m_left = length;
    m_stage = length == 0 ? Stage::done : Stage::body;
  } else if (status == 204 || status == 304) {
    m_stage = Stage::done;
  } else {
    m_until_close = true;
    m_stage = Stage::body;
  }
  return State::more;
}

AnswerDecoder::State AnswerDecoder::feed(std::string& in, std::string& body)
{
  if (!in.empty()) {
    m_started = true;
  }
  while (true) {
    switch (m_stage) {
    case Stage::head: {
      std::size_t before = in.size();
      State state = head(in);
      if (state == State::bad || in.size() == before) { // bad, or no whole head yet
        return state;
      }
      break; // a head was read (a 1xx one: the next follows)
    }
    case Stage::body: {
      if (m_until_close) {
        body += in;
        in.clear();
        return State::more;
      }
      std::size_t take = std::min(m_left, in.size());
      body.append(in, 0, take);
      in.erase(0, take);
      m_left -= take;
      if (m_left > 0) {
        return State::more;
      }
      m_stage = Stage::done;
      break;
    }
    case Stage::chunk_size: {
      std::size_t end = in.find("\r\n");
      if (end == std::string::npos) {
        return in.size() > 1024 ? State::bad : State::more;
      }
      std::string_view line(in.data(), end);
      line = trimmed(line.substr(0, line.find(';'))); // chunk extensions are passed over
      std::size_t size = 0;
      if (!parse_size(line, 16, size)) {
        return State::bad;
      }
      in.erase(0, end + 2);
      m_left = size;
      m_stage = size == 0 ? Stage::trailer : Stage::chunk_data;
      break;
    }
    case Stage::chunk_data: {
      std::size_t take = std::min(m_left, in.size());
      body.append(in, 0, take);
      in.erase(0, take);
      m_left -= take;
      if (m_left > 0) {
        return State::more;
      }
      m_stage = Stage::chunk_end;
      break;
    }
    case Stage::chunk_end:
      if (in.size() < 2) {
        return State::more;
      }
      if (in.compare(0, 2, "\r\n") != 0) {
        return State::bad;
      }
      in.erase(0, 2);
      m_stage = Stage::chunk_size;
      break;
    case Stage::trailer: { // trailer lines, up to an empty one
      std::size_t end = in.find("\r\n");
      if (end == std::string::npos) {
        return in.size() > max_head_bytes ? State::bad : State::more;
      }
      in.erase(0, end + 2);
      if (end == 0) {
        m_stage = Stage::done;
      }
      break;
    }
    case Stage::done:
      return State::done;
    }
  }
}

AnswerDecoder::State AnswerDecoder::end_of_input() const
{
  if (m_stage == Stage::done || (m_stage == Stage::body && m_until_close)) {
    return State::done;
  }
  return State::bad;
}

} // namespace dlock::etcd::http1
