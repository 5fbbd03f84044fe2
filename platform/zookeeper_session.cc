#include "platform/zookeeper_session.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

namespace farm {
namespace {

// What the client is doing in session state `state`, for messages.
std::string DescribeState(int state) {
  if (state == ZOO_CONNECTED_STATE) return "connected";
  if (state == ZOO_EXPIRED_SESSION_STATE) return "the session expired";
  if (state == ZOO_AUTH_FAILED_STATE) return "authentication failed";
  if (state == ZOO_ASSOCIATING_STATE) return "the client is setting up the session";
  if (state == ZOO_READONLY_STATE) return "connected to a read-only server";
  return "the client is still connecting";  // connecting, not connected, or nothing reported yet
}

bool IsFinal(int state) {
  return state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE;
}

// The C client's log lines, which it formats itself ("...:WARN@func@line: text\n").
void LogToSpdlog(const char* message) {
  absl::string_view line(message);
  while (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  spdlog::debug("zookeeper client: {}", std::string(line));
}

// The C client's log level is process-wide: set it once, before the first handle, to what
// spdlog shows (everything below warnings is noise unless someone debugs).
void SetClientLogLevel() {
  static std::once_flag once;
  std::call_once(once, [] {
    zoo_set_debug_level(spdlog::should_log(spdlog::level::debug) ? ZOO_LOG_LEVEL_INFO
                                                                 : ZOO_LOG_LEVEL_WARN);
  });
}

// One asynchronous call: the caller waits on it, the client's completion fills it in. Both hold
// a reference and whichever is done last frees it: a caller whose deadline passed returns, and
// the completion, when it comes, finds the call still there.
struct PendingCall {
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;              // guarded by mu
  ZooKeeperSession::Reply reply;  // guarded by mu
};
using PendingRef = std::shared_ptr<PendingCall>;

// Runs once per call the client accepted (with ZCLOSING if the handle closes first), on one of
// the client's threads. Takes back the reference the call handed over.
template <typename Fill>
void Complete(const void* data, int rc, Fill fill) {
  std::unique_ptr<PendingRef> ref(static_cast<PendingRef*>(const_cast<void*>(data)));
  PendingCall& call = **ref;
  std::lock_guard<std::mutex> l(call.mu);
  call.reply.rc = rc;
  if (rc == ZOK) fill(call.reply);
  call.done = true;
  call.done_cv.notify_all();
}

void OnData(int rc, const char* value, int value_len, const struct Stat* stat, const void* data) {
  Complete(data, rc, [&](ZooKeeperSession::Reply& r) {
    if (value != nullptr && value_len > 0) r.data.assign(value, static_cast<size_t>(value_len));
    if (stat != nullptr) r.version = stat->version;
  });
}

void OnStat(int rc, const struct Stat* stat, const void* data) {
  Complete(data, rc, [&](ZooKeeperSession::Reply& r) {
    if (stat != nullptr) r.version = stat->version;
  });
}

void OnCreated(int rc, const char* /*path*/, const void* data) {
  Complete(data, rc, [](ZooKeeperSession::Reply&) {});
}

constexpr absl::string_view kMaybeApplied = " (the write may or may not have been applied)";

}  // namespace

absl::StatusOr<std::shared_ptr<ZooKeeperSession>> ZooKeeperSession::Open(
    const std::string& connect, absl::Duration session_timeout) {
  SetClientLogLevel();
  std::shared_ptr<ZooKeeperSession> session(new ZooKeeperSession(connect));
  // The session is this handle's context until zookeeper_close, which the destructor calls.
  session->zh_ = zookeeper_init2(connect.c_str(), &ZooKeeperSession::OnSessionEvent,
                                 static_cast<int>(absl::ToInt64Milliseconds(session_timeout)),
                                 nullptr, session.get(), 0, &LogToSpdlog);
  if (session->zh_ == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("the ZooKeeper client refused the servers \"",
                                                   connect, "\": ", std::strerror(errno)));
  }
  return session;
}

ZooKeeperSession::~ZooKeeperSession() {
  // Calls still pending complete with ZCLOSING; their callers hold their own references.
  if (zh_ != nullptr) zookeeper_close(zh_);
}

void ZooKeeperSession::OnSessionEvent(zhandle_t* /*zh*/, int type, int state, const char* /*path*/,
                                      void* context) {
  if (type != ZOO_SESSION_EVENT) return;
  auto* session = static_cast<ZooKeeperSession*>(context);
  spdlog::debug("zookeeper {}: {}", session->connect_, DescribeState(state));
  std::lock_guard<std::mutex> l(session->mu_);
  session->state_ = state;
  session->state_changed_.notify_all();
}

bool ZooKeeperSession::expired() const {
  std::lock_guard<std::mutex> l(mu_);
  return IsFinal(state_);
}

absl::Status ZooKeeperSession::WaitConnected(Clock::time_point deadline) {
  std::unique_lock<std::mutex> l(mu_);
  state_changed_.wait_until(l, deadline,
                            [&] { return state_ == ZOO_CONNECTED_STATE || IsFinal(state_); });
  if (state_ == ZOO_CONNECTED_STATE) return absl::OkStatus();
  if (IsFinal(state_)) {
    return absl::UnavailableError(
        absl::StrCat(DescribeState(state_), " (the next call opens a new session)"));
  }
  return absl::UnavailableError(absl::StrCat("no session (", DescribeState(state_),
                                             "; is a ZooKeeper server running at ", connect_,
                                             "?)"));
}

absl::Status ZooKeeperSession::ConnectionTrouble(int rc, bool is_write) {
  const absl::string_view maybe = is_write ? kMaybeApplied : "";
  if (rc == ZCONNECTIONLOSS) {
    return absl::UnavailableError(absl::StrCat("the connection to ZooKeeper was lost", maybe));
  }
  if (rc == ZOPERATIONTIMEOUT) {
    return absl::UnavailableError(absl::StrCat("ZooKeeper did not answer", maybe));
  }
  if (rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE || rc == ZAUTHFAILED) {
    // Normally the session event has said so already; make sure the next call starts afresh.
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!IsFinal(state_)) state_ = ZOO_EXPIRED_SESSION_STATE;
    }
    return absl::UnavailableError(absl::StrCat("the ZooKeeper session ended: ", zerror(rc), maybe,
                                               " (the next call opens a new one)"));
  }
  if (rc == ZCLOSING || rc == ZSESSIONMOVED || rc == ZTHROTTLEDOP) {
    return absl::UnavailableError(absl::StrCat("ZooKeeper: ", zerror(rc), maybe));
  }
  return absl::OkStatus();
}

template <typename Issue>
absl::StatusOr<ZooKeeperSession::Reply> ZooKeeperSession::Call(Clock::time_point deadline,
                                                               bool is_write, Issue issue) {
  if (absl::Status s = WaitConnected(deadline); !s.ok()) return s;
  auto call = std::make_shared<PendingCall>();
  auto* handed_over = new PendingRef(call);
  const int issued = issue(handed_over);
  if (issued != ZOK) {  // not accepted: no completion will come
    delete handed_over;
    if (absl::Status s = ConnectionTrouble(issued, /*is_write=*/false); !s.ok()) return s;
    Reply refused;
    refused.rc = issued;
    return refused;
  }
  std::unique_lock<std::mutex> l(call->mu);
  if (!call->done_cv.wait_until(l, deadline, [&] { return call->done; })) {
    return absl::UnavailableError(
        absl::StrCat("ZooKeeper did not answer in time", is_write ? kMaybeApplied : ""));
  }
  if (absl::Status s = ConnectionTrouble(call->reply.rc, is_write); !s.ok()) return s;
  return call->reply;
}

absl::StatusOr<ZooKeeperSession::Reply> ZooKeeperSession::Get(const std::string& path,
                                                              Clock::time_point deadline) {
  return Call(deadline, /*is_write=*/false, [&](PendingRef* data) {
    return zoo_aget(zh_, path.c_str(), /*watch=*/0, &OnData, data);
  });
}

absl::StatusOr<ZooKeeperSession::Reply> ZooKeeperSession::Set(const std::string& path,
                                                              const std::string& data,
                                                              int32_t version,
                                                              Clock::time_point deadline) {
  if (version < 0) {  // -1 would tell ZooKeeper to skip the version check
    return absl::InvalidArgumentError(absl::StrCat("version ", version, " is not a version"));
  }
  return Call(deadline, /*is_write=*/true, [&](PendingRef* ref) {
    return zoo_aset(zh_, path.c_str(), data.data(), static_cast<int>(data.size()), version, &OnStat,
                    ref);
  });
}

absl::StatusOr<ZooKeeperSession::Reply> ZooKeeperSession::Create(const std::string& path,
                                                                 const std::string& data,
                                                                 Clock::time_point deadline) {
  return Call(deadline, /*is_write=*/true, [&](PendingRef* ref) {
    return zoo_acreate(zh_, path.c_str(), data.data(), static_cast<int>(data.size()),
                       &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT, &OnCreated, ref);
  });
}

}  // namespace farm
