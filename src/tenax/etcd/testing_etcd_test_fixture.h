// A gtest fixture with an etcd of its own for each test (testing_etcd.h), for unit tests against
// a real etcd: skipped, with the reason, in a build without the etcd client. Header-only: only
// test binaries, which link gtest, include it.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "tenax/etcd/testing_etcd.h"

namespace tenax::etcd::testing {

class EtcdTest : public ::testing::Test {
 protected:
  // A subclass's SetUp calls this first and returns when the test is skipped or failed
  // (IsSkipped(), HasFatalFailure()).
  void SetUp() override {
    if (!EtcdClientAvailable()) GTEST_SKIP() << "built without cpp-httplib (no etcd client)";
    auto started = TestingEtcd::Start();
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    etcd_ = std::move(*started);
  }
  std::unique_ptr<TestingEtcd> etcd_;
};

}  // namespace tenax::etcd::testing
