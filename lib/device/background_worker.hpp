// The CPU device's background lane: tasks run in order on one thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace shardsync {

// Runs tasks in order on one background thread (V3: process + copy into live weights).
class BackgroundWorker {
 public:
  BackgroundWorker();
  ~BackgroundWorker();
  void submit(std::function<void()> task);
  void drain();  // waits until every submitted task has run

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_, idle_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false, busy_ = false;
  std::thread thread_;
};

}  // namespace shardsync
