#include "device/background_worker.hpp"

namespace shardsync {

BackgroundWorker::BackgroundWorker() : thread_([this] { loop(); }) {}

BackgroundWorker::~BackgroundWorker() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BackgroundWorker::submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> l(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void BackgroundWorker::drain() {
  std::unique_lock<std::mutex> l(mu_);
  idle_.wait(l, [this] { return tasks_.empty() && !busy_; });
}

void BackgroundWorker::loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    cv_.wait(l, [this] { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) {
      if (stop_) return;
      continue;
    }
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    busy_ = true;
    l.unlock();
    task();
    l.lock();
    busy_ = false;
    if (tasks_.empty()) idle_.notify_all();
  }
}

}  // namespace shardsync
