#include "tenax/parallel/watched_store.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <thread>

namespace tenax::parallel {

WatchedStore::WatchedStore(c10::intrusive_ptr<c10d::Store> inner, GiveUpFn give_up)
    : c10d::Store(inner->getTimeout()), inner_(std::move(inner)), give_up_(std::move(give_up)) {}

c10::intrusive_ptr<c10d::Store> WatchedStore::clone() {
  return c10::make_intrusive<WatchedStore>(inner_->clone(), give_up_);
}

void WatchedStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  inner_->set(key, value);
}

std::vector<uint8_t> WatchedStore::compareSet(const std::string& key,
                                              const std::vector<uint8_t>& expected,
                                              const std::vector<uint8_t>& desired) {
  return inner_->compareSet(key, expected, desired);
}

std::vector<uint8_t> WatchedStore::get(const std::string& key) {
  wait({key});
  return inner_->get(key);
}

int64_t WatchedStore::add(const std::string& key, int64_t value) { return inner_->add(key, value); }

bool WatchedStore::deleteKey(const std::string& key) { return inner_->deleteKey(key); }

bool WatchedStore::check(const std::vector<std::string>& keys) { return inner_->check(keys); }

int64_t WatchedStore::getNumKeys() { return inner_->getNumKeys(); }

void WatchedStore::wait(const std::vector<std::string>& keys) { wait(keys, getTimeout()); }

void WatchedStore::wait(const std::vector<std::string>& keys,
                        const std::chrono::milliseconds& timeout) {
  const auto t0 = std::chrono::steady_clock::now();
  auto pause = std::chrono::milliseconds(1);
  while (!inner_->check(keys)) {
    if (std::optional<std::string> why = give_up_ ? give_up_() : std::nullopt) {
      C10_THROW_ERROR(DistStoreError,
                      fmt::format("stopped waiting for {}: {}", fmt::join(keys, ", "), *why));
    }
    if (timeout != kNoTimeout && std::chrono::steady_clock::now() - t0 > timeout) {
      C10_THROW_ERROR(DistStoreError, fmt::format("timed out after {} ms waiting for {}",
                                                  timeout.count(), fmt::join(keys, ", ")));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

const std::chrono::milliseconds& WatchedStore::getTimeout() const noexcept {
  return inner_->getTimeout();
}

void WatchedStore::setTimeout(const std::chrono::milliseconds& timeout) {
  inner_->setTimeout(timeout);
}

std::vector<std::vector<uint8_t>> WatchedStore::multiGet(const std::vector<std::string>& keys) {
  wait(keys);
  return inner_->multiGet(keys);
}

void WatchedStore::multiSet(const std::vector<std::string>& keys,
                            const std::vector<std::vector<uint8_t>>& values) {
  inner_->multiSet(keys, values);
}

void WatchedStore::append(const std::string& key, const std::vector<uint8_t>& value) {
  inner_->append(key, value);
}

bool WatchedStore::hasExtendedApi() const { return inner_->hasExtendedApi(); }

}  // namespace tenax::parallel
