// The mutex, scoped locks and notification ncclwatch code uses: abseil's, except in a
// ThreadSanitizer build.
//
// Debian's abseil is not built with TSan, so the synchronisation inside absl::Mutex (atomics and
// futexes in an uninstrumented library) is invisible to it: two threads that take turns under one
// absl::Mutex look like a data race. In a TSan build these names therefore stand for a small
// equivalent on std::mutex and std::condition_variable, whose pthread calls TSan intercepts, so
// every race it reports in our code is real. The subset of absl::Mutex we use is kept, with the
// same thread-safety annotations: Lock/Unlock, reader locks (exclusive here), Await,
// AwaitWithTimeout and AwaitWithDeadline on an absl::Condition, and absl::Notification's interface.
#ifndef NCCLWATCH_COMMON_SYNC_H_
#define NCCLWATCH_COMMON_SYNC_H_

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

#if defined(__SANITIZE_THREAD__)
#define NCCLWATCH_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NCCLWATCH_TSAN 1
#endif
#endif

#ifdef NCCLWATCH_TSAN
#include <sanitizer/tsan_interface.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#endif

namespace ncclwatch {

#ifndef NCCLWATCH_TSAN

using Mutex = absl::Mutex;
using MutexLock = absl::MutexLock;
using ReaderMutexLock = absl::ReaderMutexLock;
using Notification = absl::Notification;

#else

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  // absl::Mutex re-evaluates waiters' conditions when it is released; so do we.
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    cv_.notify_all();
    mu_.unlock();
  }
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() { Lock(); }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() { Unlock(); }

  void Await(const absl::Condition& cond) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    AwaitWithDeadline(cond, absl::InfiniteFuture());
  }
  bool AwaitWithTimeout(const absl::Condition& cond, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    return AwaitWithDeadline(cond, absl::Now() + timeout);
  }
  bool AwaitWithDeadline(const absl::Condition& cond, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    bool met = true;
    while (!cond.Eval()) {
      // Waiting releases the mutex, as Unlock does: what this thread changed under it may be
      // what another waiter waits for.
      cv_.notify_all();
      if (deadline == absl::InfiniteFuture()) {
        cv_.wait(lock);
      } else if (absl::Now() >= deadline) {
        met = false;
        break;
      } else {
        cv_.wait_until(lock, absl::ToChronoTime(deadline));
      }
    }
    lock.release();  // still held, as absl's Await leaves it
    return met;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }

 private:
  Mutex* const mu_;
};

class ABSL_SCOPED_LOCKABLE ReaderMutexLock {
 public:
  explicit ReaderMutexLock(Mutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) { mu_->ReaderLock(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;
  ~ReaderMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->ReaderUnlock(); }

 private:
  Mutex* const mu_;
};

class Notification {
 public:
  void Notify() {
    MutexLock lock(&mu_);
    notified_ = true;
  }
  bool HasBeenNotified() const {
    MutexLock lock(&mu_);
    return notified_;
  }
  void WaitForNotification() const {
    MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&notified_));
  }
  bool WaitForNotificationWithTimeout(absl::Duration timeout) const {
    MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&notified_), timeout);
  }

 private:
  mutable Mutex mu_;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
};

#endif  // NCCLWATCH_TSAN

// gRPC passes a callback reactor from the thread that made it, or started an operation on it, to
// the thread that calls it back, through synchronisation TSan cannot see. Reactors mark those
// hand-offs so that TSan sees them too: HandOff(this) at the end of the constructor and before
// each Start* call, TakeOver(this) first thing in each On* callback. No-ops outside TSan builds.
#ifdef NCCLWATCH_TSAN
inline void HandOff(const void* reactor) { __tsan_release(const_cast<void*>(reactor)); }
inline void TakeOver(const void* reactor) { __tsan_acquire(const_cast<void*>(reactor)); }
#else
inline void HandOff(const void*) {}
inline void TakeOver(const void*) {}
#endif

}  // namespace ncclwatch

#endif  // NCCLWATCH_COMMON_SYNC_H_
