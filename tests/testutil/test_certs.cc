#include "tests/testutil/test_certs.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "tests/testutil/child_process.h"

namespace moe::testing {
namespace {

absl::Status Openssl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  const CommandResult r = RunCommand(argv, std::chrono::seconds(30));
  if (r.exit_code != 0) {
    return absl::InternalError(
        absl::StrCat("openssl ", args[0], " failed: ", r.output));
  }
  return absl::OkStatus();
}

absl::Status MakeCa(const std::string& dir, const std::string& name) {
  return Openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt",
                  "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                  "-subj", "/CN=" + name, "-keyout", dir + "/" + name + ".key",
                  "-out", dir + "/" + name + ".pem"});
}

absl::Status MakeLeaf(const std::string& dir, const std::string& ca,
                      const std::string& name, const std::string& ext) {
  const std::string base = dir + "/" + name;
  std::ofstream(base + ".ext") << ext << "\n";
  if (absl::Status s = Openssl({"req", "-newkey", "ec", "-pkeyopt",
                                "ec_paramgen_curve:prime256v1", "-nodes",
                                "-subj", "/CN=" + name, "-keyout",
                                base + ".key", "-out", base + ".csr"});
      !s.ok()) {
    return s;
  }
  return Openssl({"x509", "-req", "-in", base + ".csr", "-CA",
                  dir + "/" + ca + ".pem", "-CAkey", dir + "/" + ca + ".key",
                  "-CAcreateserial", "-days", "2", "-extfile", base + ".ext",
                  "-out", base + ".pem"});
}

}  // namespace

absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir) {
  for (const auto& s :
       {MakeCa(dir, "ca"), MakeCa(dir, "rogue-ca"),
        MakeLeaf(dir, "ca", "server",
                 "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage="
                 "serverAuth"),
        MakeLeaf(dir, "ca", "worker", "extendedKeyUsage=clientAuth"),
        MakeLeaf(dir, "rogue-ca", "rogue", "extendedKeyUsage=clientAuth")}) {
    if (!s.ok()) return s;
  }
  TestCerts c;
  c.ca = dir + "/ca.pem";
  c.server_cert = dir + "/server.pem";
  c.server_key = dir + "/server.key";
  c.client_cert = dir + "/worker.pem";
  c.client_key = dir + "/worker.key";
  c.rogue_ca = dir + "/rogue-ca.pem";
  c.rogue_cert = dir + "/rogue.pem";
  c.rogue_key = dir + "/rogue.key";
  return c;
}

}  // namespace moe::testing
