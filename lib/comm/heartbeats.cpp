// Heartbeats over UDP (see heartbeats.hpp). A datagram: magic, kind (beat or leave), the
// sender's world rank, the job token. The socket has IP_RECVERR on, so an ICMP port-unreachable
// answer to a beat (the peer's port is closed: its process is gone) is read from the error
// queue with the address it was sent to.
#include "comm/heartbeats.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/errqueue.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/error.hpp"

namespace shardsync {

namespace {

constexpr uint32_t kMagic = 0x53534842;  // "SSHB"
constexpr uint32_t kBeat = 1, kLeave = 2, kEnding = 3;  // kEnding: the sender lost `about`
constexpr size_t kHostBytes = 64;

struct Datagram {
  uint32_t magic, kind;
  int32_t from;
  int32_t about;  // kEnding: the rank the sender lost
  uint32_t loss;  // kEnding: PeerLoss::Kind
  float silent_s; // kEnding: the loss's silence
  uint64_t token;
};

double clock_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string this_host() {
  char name[kHostBytes] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

// The address peers on other hosts reach: SHARDSYNC_HEARTBEAT_IF's, else the first interface up
// that is not loopback, else loopback (a single host).
uint32_t advertised_address() {
  const char* want = std::getenv("SHARDSYNC_HEARTBEAT_IF");
  ifaddrs* list = nullptr;
  uint32_t found = htonl(INADDR_LOOPBACK);
  if (getifaddrs(&list) != 0) return found;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    if (want && *want ? std::strcmp(i->ifa_name, want) != 0 : (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    found = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
    break;
  }
  freeifaddrs(list);
  if (want && *want && found == htonl(INADDR_LOOPBACK) && std::strcmp(want, "lo") != 0)
    throw InputError("SHARDSYNC_HEARTBEAT_IF", want, "an IPv4 interface of this host that is up");
  return found;
}

template <class T>
void put(std::vector<uint8_t>& out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

template <class T>
T get(const std::vector<uint8_t>& in, size_t at) {
  T v{};
  if (at + sizeof v > in.size()) throw Error("heartbeats: a contact of " + std::to_string(in.size()) + " bytes is truncated");
  std::memcpy(&v, in.data() + at, sizeof v);
  return v;
}

}  // namespace

std::string PeerLoss::describe() const {
  char buf[200];
  const std::string by = seen_by >= 0 ? ", seen by rank " + std::to_string(seen_by) : "";
  if (ended_on >= 0)
    std::snprintf(buf, sizeof buf, "its process ended on losing rank %d", ended_on);
  else if (kind == Kind::kGone)
    std::snprintf(buf, sizeof buf, "its process is gone (heartbeat port closed, last heartbeat %.1f s ago%s)", silent_s, by.c_str());
  else
    std::snprintf(buf, sizeof buf, "no heartbeat for %.1f s%s", silent_s, seen_by >= 0 ? (" (" + by.substr(2) + ")").c_str() : "");
  return buf;
}

Heartbeats::Heartbeats(int rank, int size, uint64_t token) : rank_(rank), token_(token), peers_(size_t(size)) {
  fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) throw Error(std::string("heartbeats: socket: ") + std::strerror(errno));
  const int on = 1;
  setsockopt(fd_, IPPROTO_IP, IP_RECVERR, &on, sizeof on);  // a closed peer port: the error queue
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  if (bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const std::string why = std::strerror(errno);
    close(fd_);
    throw Error("heartbeats: bind: " + why);
  }
  my_port_ = a.sin_port;
  host_ = this_host();
  try {
    my_addr_ = advertised_address();
  } catch (...) {
    close(fd_);
    throw;
  }
}

Heartbeats::~Heartbeats() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) close(fd_);
}

std::vector<uint8_t> Heartbeats::contact() const {
  std::vector<uint8_t> out;
  put(out, token_);
  put(out, my_addr_);
  put(out, my_port_);
  char host[kHostBytes] = {};
  std::snprintf(host, sizeof host, "%s", host_.c_str());
  out.insert(out.end(), host, host + kHostBytes);
  return out;
}

uint64_t Heartbeats::token_of(const std::vector<uint8_t>& contact) { return get<uint64_t>(contact, 0); }

void Heartbeats::set_peer(int peer, const std::vector<uint8_t>& contact) {
  if (peer < 0 || size_t(peer) >= peers_.size() || peer == rank_) return;
  if (contact.size() != 8 + 4 + 2 + kHostBytes)
    throw Error("heartbeats: the contact of rank " + std::to_string(peer) + " has " + std::to_string(contact.size()) +
                " bytes, expected " + std::to_string(8 + 4 + 2 + kHostBytes));
  if (token_of(contact) != token_)
    throw Error("heartbeats: rank " + std::to_string(peer) + " belongs to another job (token differs)");
  const std::string host(reinterpret_cast<const char*>(contact.data() + 14), strnlen(reinterpret_cast<const char*>(contact.data() + 14), kHostBytes));
  std::lock_guard<std::mutex> lock(mu_);
  Peer& p = peers_[size_t(peer)];
  p = Peer{};
  p.known = true;
  p.addr = host == host_ ? htonl(INADDR_LOOPBACK) : get<uint32_t>(contact, 8);
  p.port = get<uint16_t>(contact, 12);
  p.last_heard = clock_s();
}

void Heartbeats::start(double timeout_s, OnLoss on_loss) {
  timeout_s_ = timeout_s;
  interval_s_ = std::clamp(timeout_s / 10, 0.002, 0.5);
  on_loss_ = std::move(on_loss);
  {
    std::lock_guard<std::mutex> lock(mu_);
    const double now = clock_s();
    for (Peer& p : peers_) p.last_heard = std::max(p.last_heard, now);  // the clock starts with the watch
  }
  thread_ = std::thread([this] { run(); });
}

void Heartbeats::leave() {
  if (stop_.exchange(true)) return;
  if (thread_.joinable()) thread_.join();
  send_all(kLeave);
}

void Heartbeats::announce_loss(int peer, const PeerLoss& why) { send_all(kEnding, peer, uint32_t(why.kind)); }

void Heartbeats::send_all(uint32_t kind, int32_t about, uint32_t loss) {
  float silent = 0;
  if (about >= 0 && size_t(about) < peers_.size()) {
    std::lock_guard<std::mutex> lock(mu_);
    silent = float(clock_s() - peers_[size_t(about)].last_heard);
  }
  Datagram d{kMagic, kind, rank_, about, loss, silent, token_};
  std::vector<sockaddr_in> to;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Peer& p : peers_)
      if (p.known && !p.gone) {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = p.addr;
        a.sin_port = p.port;
        to.push_back(a);
      }
  }
  // Errors (a closed port reported on an earlier send, a full buffer) are the error queue's
  // business or the timeout's: a beat is never retried.
  for (const sockaddr_in& a : to) sendto(fd_, &d, sizeof d, 0, reinterpret_cast<const sockaddr*>(&a), sizeof a);
}

void Heartbeats::receive(double now) {
  for (;;) {
    Datagram d{};
    const ssize_t n = recv(fd_, &d, sizeof d, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      continue;  // ECONNREFUSED and the like: a pending ICMP error, read from the queue
    }
    if (size_t(n) != sizeof d || d.magic != kMagic || d.token != token_ || d.from < 0 || size_t(d.from) >= peers_.size())
      continue;  // not ours
    std::lock_guard<std::mutex> lock(mu_);
    Peer& p = peers_[size_t(d.from)];
    if (!p.known) continue;
    if (d.kind == kLeave) p.left = true;  // leaving is not a loss; ending on a loss is
    if (d.kind == kEnding) p.ended_on = std::max(0, d.about);
    p.last_heard = now;
    if (d.kind == kEnding && d.about >= 0 && size_t(d.about) < peers_.size() && d.about != rank_) {
      Peer& q = peers_[size_t(d.about)];
      if (q.known && !q.left && q.told_by < 0) {
        q.told_by = d.from;
        q.told = PeerLoss{d.loss == uint32_t(PeerLoss::Kind::kGone) ? PeerLoss::Kind::kGone : PeerLoss::Kind::kSilent,
                          double(d.silent_s), d.from};
      }
    }
  }
}

void Heartbeats::read_errors() {
  for (;;) {
    char control[512];
    sockaddr_in to{};
    Datagram d{};
    iovec iov{&d, sizeof d};
    msghdr msg{};
    msg.msg_name = &to;
    msg.msg_namelen = sizeof to;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    if (recvmsg(fd_, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) return;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != IPPROTO_IP || c->cmsg_type != IP_RECVERR) continue;
      const auto* e = reinterpret_cast<const sock_extended_err*>(CMSG_DATA(c));
      if (e->ee_origin != SO_EE_ORIGIN_ICMP || e->ee_type != 3 /* unreachable */ || e->ee_code != 3 /* port */) continue;
      std::lock_guard<std::mutex> lock(mu_);
      for (Peer& p : peers_)
        if (p.known && p.addr == to.sin_addr.s_addr && p.port == to.sin_port) p.gone = true;
    }
  }
}

bool Heartbeats::lost_locked(const Peer& p, double now, PeerLoss* why) const {
  if (!p.known || p.left) return false;
  if (p.told_by >= 0 && !p.gone) {
    if (why) *why = p.told;
    return true;
  }
  const double silent = now - p.last_heard;
  if (p.ended_on >= 0) {
    if (why) *why = PeerLoss{PeerLoss::Kind::kGone, silent, -1, p.ended_on};
    return true;
  }
  if (!p.gone && silent <= timeout_s_) return false;
  if (why) *why = PeerLoss{p.gone ? PeerLoss::Kind::kGone : PeerLoss::Kind::kSilent, silent, -1, -1};
  return true;
}

bool Heartbeats::lost(int peer, PeerLoss* why) const {
  if (peer < 0 || size_t(peer) >= peers_.size() || !thread_.joinable()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return lost_locked(peers_[size_t(peer)], clock_s(), why);
}

double Heartbeats::silent_s(int peer) const {
  if (peer < 0 || size_t(peer) >= peers_.size()) return -1;
  std::lock_guard<std::mutex> lock(mu_);
  const Peer& p = peers_[size_t(peer)];
  return p.known ? clock_s() - p.last_heard : -1;
}

void Heartbeats::run() {
  double next_beat = 0;
  while (!stop_) {
    double now = clock_s();
    if (now >= next_beat) {
      send_all(kBeat);
      next_beat = now + interval_s_;
    }
    pollfd pfd{fd_, POLLIN, 0};
    poll(&pfd, 1, std::max(1, int((next_beat - now) * 1000)));
    now = clock_s();
    receive(now);
    read_errors();
    // Losses, each reported once (outside the lock: the handler may take its time, or end the
    // process), the longest silent first: the first to die, not a rank that ended after it.
    std::vector<std::pair<int, PeerLoss>> newly;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t r = 0; r < peers_.size(); ++r) {
        PeerLoss why;
        if (!peers_[r].reported && lost_locked(peers_[r], now, &why)) {
          peers_[r].reported = true;
          newly.emplace_back(int(r), why);
        }
      }
    }
    std::stable_sort(newly.begin(), newly.end(), [](const auto& a, const auto& b) {
      const bool ea = a.second.ended_on >= 0, eb = b.second.ended_on >= 0;
      return ea != eb ? eb : a.second.silent_s > b.second.silent_s;
    });
    for (const auto& [r, why] : newly)
      if (on_loss_) on_loss_(r, why);
  }
}

}  // namespace shardsync
