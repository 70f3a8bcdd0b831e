#include "transport/frame.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <iterator>

namespace jobkit::detail {

void check_header(const frame_header& h) {
  if (h.magic != frame_magic) throw protocol_violation{fmt::format("a frame with a bad magic number {:#x}", h.magic)};
  if (h.type < static_cast<std::uint32_t>(frame_type::up) || h.type > static_cast<std::uint32_t>(frame_type::by_tree)) {
    throw protocol_violation{fmt::format("a frame of unknown type {}", h.type)};
  }
  if ((is(h, frame_type::receipt) || is(h, frame_type::by_tree)) && h.payload_size != 0) {
    throw protocol_violation{
        fmt::format("a frame of type {} announcing {} payload bytes (it carries none)", h.type, h.payload_size)};
  }
  if (h.name_size > max_name_size || h.site_size > max_site_size) {
    throw protocol_violation{
        fmt::format("a frame header announcing a {}-byte name and a {}-byte call site "
                    "(limits {} and {})",
                    h.name_size, h.site_size, max_name_size, max_site_size)};
  }
  if (h.payload_size > max_payload_size) {
    throw protocol_violation{
        fmt::format("a frame header announcing {} payload bytes (limit {})", h.payload_size, max_payload_size)};
  }
}

void send_frame(int fd, frame_type type, std::uint64_t sequence, int origin, std::string_view name,
                std::string_view site, std::span<const std::byte> payload, steady_clock::time_point deadline) {
  const iovec part{const_cast<std::byte*>(payload.data()), payload.size()};
  send_frame_parts(fd, type, sequence, origin, name, site, payload.size(), {&part, 1}, deadline);
}

void send_frame_parts(int fd, frame_type type, std::uint64_t sequence, int origin, std::string_view name,
                      std::string_view site, std::uint64_t payload_size, std::span<const iovec> parts,
                      steady_clock::time_point deadline) {
  if (payload_size > max_payload_size) {
    throw error(errc::invalid_argument,
                fmt::format("{} at {}: {} bytes would cross one link of the data path, more than its limit of {} "
                            "bytes per collective (move bulk data with NCCL, or in pieces)",
                            name, site, payload_size, max_payload_size));
  }
  frame_header h{frame_magic,
                 static_cast<std::uint32_t>(type),
                 sequence,
                 static_cast<std::uint32_t>(origin),
                 static_cast<std::uint16_t>(std::min(name.size(), max_name_size)),
                 static_cast<std::uint16_t>(std::min(site.size(), max_site_size)),
                 payload_size};
  const iovec head[] = {
      {&h, sizeof h}, {const_cast<char*>(name.data()), h.name_size}, {const_cast<char*>(site.data()), h.site_size}};
  constexpr std::size_t on_stack = 8;  // a small frame costs no allocation
  iovec few[std::size(head) + on_stack];
  std::vector<iovec> many;
  iovec* all = few;
  if (parts.size() > on_stack) {
    many.resize(std::size(head) + parts.size());
    all = many.data();
  }
  std::copy(std::begin(head), std::end(head), all);
  std::copy(parts.begin(), parts.end(), all + std::size(head));
  send_all(fd, all, static_cast<int>(std::size(head) + parts.size()), deadline);
}

frame receive_frame_head(int fd, steady_clock::time_point deadline) {
  frame f;
  receive_all(fd, &f.header, sizeof f.header, deadline);
  check_header(f.header);
  f.name.resize(f.header.name_size);
  f.site.resize(f.header.site_size);
  receive_all(fd, f.name.data(), f.name.size(), deadline);
  receive_all(fd, f.site.data(), f.site.size(), deadline);
  return f;
}

void receive_payload(int fd, frame& f, steady_clock::time_point deadline) {
  // Grown as the bytes arrive (at most doubling), so a header that announces more than is sent
  // cannot make this rank allocate it.
  const auto size = static_cast<std::size_t>(f.header.payload_size);
  constexpr std::size_t first_chunk = std::size_t{1} << 20;
  while (f.payload.size() < size) {
    const auto had = f.payload.size();
    f.payload.resize(had + std::min(size - had, std::max(first_chunk, had)));
    receive_all(fd, f.payload.data() + had, f.payload.size() - had, deadline);
  }
}

frame receive_frame(int fd, steady_clock::time_point deadline) {
  frame f = receive_frame_head(fd, deadline);
  receive_payload(fd, f, deadline);
  return f;
}

std::span<const std::byte> as_bytes(std::string_view text) {
  return {reinterpret_cast<const std::byte*>(text.data()), text.size()};
}

void append_entries(std::vector<std::byte>& out, const std::vector<const rank_bytes*>& entries) {
  auto put = [&](const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    out.insert(out.end(), b, b + n);
  };
  std::size_t total = sizeof(std::uint32_t);
  for (const auto* e : entries) total += sizeof(std::uint32_t) + sizeof(std::uint64_t) + e->bytes.size();
  out.reserve(out.size() + total);
  const auto count = static_cast<std::uint32_t>(entries.size());
  put(&count, sizeof count);
  for (const auto* e : entries) {
    const auto r = static_cast<std::uint32_t>(e->rank);
    const std::uint64_t n = e->bytes.size();
    put(&r, sizeof r);
    put(&n, sizeof n);
    put(e->bytes.data(), e->bytes.size());
  }
}

std::vector<rank_bytes> parse_entries(std::span<const std::byte> in, int group_size) {
  std::size_t at = 0;
  auto take = [&](void* p, std::size_t n) {
    if (n > in.size() - at) throw protocol_violation{"a truncated payload"};
    std::memcpy(p, in.data() + at, n);
    at += n;
  };
  std::uint32_t count = 0;
  take(&count, sizeof count);
  constexpr std::size_t entry_header = sizeof(std::uint32_t) + sizeof(std::uint64_t);
  if (count > static_cast<std::uint32_t>(group_size) || count > (in.size() - at) / entry_header) {
    throw protocol_violation{
        fmt::format("a payload announcing {} entries in {} bytes for a group of {}", count, in.size(), group_size)};
  }
  std::vector<rank_bytes> entries(count);
  for (auto& e : entries) {
    std::uint32_t r = 0;
    std::uint64_t n = 0;
    take(&r, sizeof r);
    take(&n, sizeof n);
    if (r >= static_cast<std::uint32_t>(group_size)) {
      throw protocol_violation{fmt::format("a payload entry for rank {} in a group of {}", r, group_size)};
    }
    if (n > in.size() - at) throw protocol_violation{"a truncated payload"};
    e.rank = static_cast<int>(r);
    e.bytes.assign(in.begin() + static_cast<std::ptrdiff_t>(at), in.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  if (at != in.size()) throw protocol_violation{fmt::format("{} bytes after the last payload entry", in.size() - at)};
  return entries;
}

std::uint64_t read_pieces(const std::function<void(void*, std::size_t)>& take, std::uint64_t payload_size,
                          const exchange& ex, int group_size, const std::function<bool(int)>& due) {
  std::uint64_t left = payload_size;
  const auto read = [&](void* to, std::size_t n) {
    if (n > left) throw protocol_violation{"a truncated payload"};
    take(to, n);
    left -= n;
  };
  std::uint64_t size = 0;
  read(&size, sizeof size);
  if (size != ex.buffer.size()) return size;
  std::uint32_t count = 0;
  read(&count, sizeof count);
  std::size_t expected = 0;
  for (int r = 0; r < group_size; ++r) expected += due(r) ? 1 : 0;
  if (count != expected) throw protocol_violation{fmt::format("{} pieces where {} are due", count, expected)};
  std::vector<bool> got(static_cast<std::size_t>(group_size), false);
  for (std::uint32_t k = 0; k < count; ++k) {
    std::uint32_t r = 0;
    std::uint64_t n = 0;
    read(&r, sizeof r);
    read(&n, sizeof n);
    const int rank = static_cast<int>(std::min<std::uint32_t>(r, static_cast<std::uint32_t>(group_size)));
    if (rank >= group_size || !due(rank) || got[static_cast<std::size_t>(rank)]) {
      throw protocol_violation{fmt::format("a piece for rank {}, which is not one due in this frame", r)};
    }
    if (n != ex.piece_size()) {
      throw protocol_violation{fmt::format("a piece of {} bytes where {} were due", n, ex.piece_size())};
    }
    got[static_cast<std::size_t>(rank)] = true;
    read(ex.buffer.data() + ex.piece_offset(rank), n);
  }
  if (left != 0) throw protocol_violation{fmt::format("{} bytes after the last piece", left)};
  return size;
}

std::optional<abort_notice> abort_in(const frame& f) {
  if (!is(f.header, frame_type::abort)) return std::nullopt;
  int code = -1;
  const auto [end, ec] = std::from_chars(f.name.data(), f.name.data() + f.name.size(), code);
  const bool known = ec == std::errc() && end == f.name.data() + f.name.size() && code >= 0 &&
                     code <= static_cast<int>(errc::internal);
  return abort_notice{std::string(reinterpret_cast<const char*>(f.payload.data()), f.payload.size()),
                      static_cast<int>(f.header.origin), known ? static_cast<errc>(code) : errc::peer_failure};
}

bool send_abort(int fd, std::uint64_t sequence, int origin, errc code, std::string_view message,
                steady_clock::time_point deadline) noexcept {
  try {
    send_frame(fd, frame_type::abort, sequence, origin, std::to_string(static_cast<int>(code)), "", as_bytes(message),
               deadline);
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace jobkit::detail
