#pragma once

// A pthread mutex held for a scope: the lock of a process-wide state that its atfork handlers take
// around a fork (the where record, the watch, the progress tracker), which std::mutex offers no
// way to do from a plain function.

#include <pthread.h>

namespace jobkit::detail {

class mutex_held {
 public:
  explicit mutex_held(pthread_mutex_t& mutex) noexcept : mutex_(mutex) { ::pthread_mutex_lock(&mutex_); }
  ~mutex_held() { ::pthread_mutex_unlock(&mutex_); }
  mutex_held(const mutex_held&) = delete;
  mutex_held& operator=(const mutex_held&) = delete;

 private:
  pthread_mutex_t& mutex_;
};

}  // namespace jobkit::detail
