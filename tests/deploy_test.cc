// The deployment files as a cluster would read them, short of a cluster: deploy/kubernetes/'s
// manifests against Kubernetes' own API schemas (kubernetes-validate, strict: unknown fields are
// errors), with a broken copy rejected to show the check bites; the TLS Secret its script prints,
// whose certificates must verify against its CA; and deploy/slurm/'s scripts parsed by bash.
// tests/slurm_e2e_test.cc runs the Slurm recipe itself on a real Slurm cluster.
#include <gtest/gtest.h>

#include <filesystem>

#include "test_util.h"

namespace tenax::testing {
namespace {

std::string DeployFile(const std::string& file) { return SourceDir() + "/deploy/" + file; }

std::string Validator() {
  return (std::filesystem::path(Python()).parent_path() / "kubernetes-validate").string();
}

// Kubernetes 1.30: the oldest release still supported on the major clouds' managed clusters
// when this was written, and the first whose Job has every field the manifests use.
CommandResult Validate(const std::string& files) {
  return RunCommand(Validator() + " --strict -k 1.30.0 " + files + " 2>&1");
}

class Deploy : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(Validator())) {
      GTEST_SKIP() << Validator() << " is missing (./scripts/setup installs kubernetes-validate)";
    }
  }
  TempDir dir_;
};

TEST_F(Deploy, KubernetesManifestsMatchTheApiSchemas) {
  const auto r =
      Validate(DeployFile("kubernetes/etcd.yaml") + " " + DeployFile("kubernetes/tenax-job.yaml"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* resource : {"service/tenax-etcd", "statefulset/tenax-etcd",
                               "service/tenax-llama3", "job/tenax-llama3"}) {
    EXPECT_NE(r.output.find(std::string(resource) + " against version 1.30"), std::string::npos)
        << resource << "\n"
        << r.output;
  }
  // The check bites: a field the Job API does not have, and a count that is not a number.
  std::string job = ReadFile(DeployFile("kubernetes/tenax-job.yaml"));
  const std::string broken = dir_ / "broken.yaml";
  std::string unknown = job;
  unknown.replace(unknown.find("  completionMode: Indexed"), 25, "  completionModes: Indexed");
  WriteFile(broken, unknown);
  EXPECT_NE(Validate(broken).exit_code, 0);
  std::string not_a_number = job;
  not_a_number.replace(not_a_number.find("  completions: 3"), 16, "  completions: three");
  WriteFile(broken, not_a_number);
  EXPECT_NE(Validate(broken).exit_code, 0);
}

TEST_F(Deploy, TheTlsSecretHoldsCertificatesThatVerify) {
  const std::string secret = dir_ / "secret.yaml";
  auto r = RunCommand("NAMESPACE=training " + DeployFile("kubernetes/make-tls-secret.sh") + " > " +
                      secret);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = Validate(secret);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // Decode the five files and check the chain and the members' names.
  for (const char* f : {"ca.crt", "server.crt", "server.key", "client.crt", "client.key"}) {
    r = RunCommand(std::string("sed -n 's/^  ") + f + ": //p' " + secret + " | base64 -d > " +
                   (dir_ / f));
    ASSERT_EQ(r.exit_code, 0) << f;
  }
  r = RunCommand("openssl verify -CAfile " + (dir_ / "ca.crt") + " " + (dir_ / "server.crt") + " " +
                 (dir_ / "client.crt"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = RunCommand("openssl x509 -noout -ext subjectAltName -in " + (dir_ / "server.crt"));
  EXPECT_NE(r.output.find("DNS:tenax-etcd-2.tenax-etcd.training.svc"), std::string::npos)
      << r.output;
}

TEST(DeploySlurm, ScriptsParse) {
  for (const char* f : {"tenax.sbatch", "tenax-spare.sbatch", "tenax-slurm.sh"}) {
    const auto r = RunCommand("bash -n " + DeployFile(std::string("slurm/") + f) + " 2>&1");
    EXPECT_EQ(r.exit_code, 0) << f << ": " << r.output;
  }
}

}  // namespace
}  // namespace tenax::testing
