#include "daemon/testing/test_certs.h"

#include <unistd.h>

#include <fstream>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/testing/subprocess.h"

namespace shardd::tests {
namespace {

std::string FindOpenssl() {
  const char* path = getenv("PATH");
  if (path != nullptr) {
    for (absl::string_view dir : absl::StrSplit(path, ':')) {
      if (dir.empty()) continue;
      const std::string candidate = absl::StrCat(dir, "/openssl");
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  return "/usr/bin/openssl";
}

absl::Status Run(const std::string& openssl, std::vector<std::string> args) {
  args.insert(args.begin(), openssl);
  const std::string command = absl::StrJoin(args, " ");
  absl::StatusOr<std::unique_ptr<Subprocess>> child =
      Subprocess::Spawn(args, "openssl");
  if (!child.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(command, ": ", child.status().message()));
  }
  // Drain stdout (openssl prints little there) until it exits.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while ((*child)->ReadLine(deadline).ok()) {
  }
  absl::StatusOr<int> code = (*child)->Wait(deadline);
  if (!code.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(command, ": ", code.status().message()));
  }
  if (*code != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(command, ": exit code ", *code,
                     *code == 127 ? " (is Debian's openssl installed?)" : ""));
  }
  return absl::OkStatus();
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// A self-signed CA certificate and key.
absl::Status MakeCa(const std::string& openssl, const std::string& dir,
                    const std::string& name, const std::string& cn) {
  return Run(openssl, {"req", "-x509", "-newkey", "ec", "-pkeyopt",
                       "ec_paramgen_curve:prime256v1", "-nodes", "-days",
                       "3650", "-subj", absl::StrCat("/CN=", cn), "-addext",
                       "basicConstraints=critical,CA:TRUE", "-addext",
                       "keyUsage=critical,keyCertSign,cRLSign", "-keyout",
                       absl::StrCat(dir, "/", name, ".key"), "-out",
                       absl::StrCat(dir, "/", name, ".pem")});
}

// A leaf certificate `name`.pem/.key signed by `ca`, with the extensions of
// `extfile`.
absl::Status MakeLeaf(const std::string& openssl, const std::string& dir,
                      const std::string& name, const std::string& cn,
                      const std::string& ca, const std::string& extfile) {
  const std::string base = absl::StrCat(dir, "/", name);
  absl::Status s = Run(openssl, {"req", "-newkey", "ec", "-pkeyopt",
                                 "ec_paramgen_curve:prime256v1", "-nodes",
                                 "-subj", absl::StrCat("/CN=", cn), "-keyout",
                                 base + ".key", "-out", base + ".csr"});
  if (!s.ok()) return s;
  return Run(openssl,
             {"x509", "-req", "-in", base + ".csr", "-CA",
              absl::StrCat(dir, "/", ca, ".pem"), "-CAkey",
              absl::StrCat(dir, "/", ca, ".key"), "-CAcreateserial", "-days",
              "3650", "-sha256", "-extfile", extfile, "-out", base + ".pem"});
}

}  // namespace

absl::StatusOr<TestCerts> GenerateTestCerts(const std::string& dir) {
  const std::string openssl = FindOpenssl();
  const std::string node_ext = absl::StrCat(dir, "/node.ext");
  const std::string client_ext = absl::StrCat(dir, "/client.ext");
  absl::Status s = WriteFile(node_ext,
                             "basicConstraints=CA:FALSE\n"
                             "keyUsage=critical,digitalSignature\n"
                             "extendedKeyUsage=serverAuth,clientAuth\n"
                             "subjectAltName=DNS:localhost,IP:127.0.0.1\n");
  if (s.ok()) {
    s = WriteFile(client_ext,
                  "basicConstraints=CA:FALSE\n"
                  "keyUsage=critical,digitalSignature\n"
                  "extendedKeyUsage=clientAuth\n");
  }
  if (s.ok()) s = MakeCa(openssl, dir, "ca", "shardd test CA");
  if (s.ok()) s = MakeCa(openssl, dir, "other-ca", "some other CA");
  if (s.ok()) s = MakeLeaf(openssl, dir, "node", "shardd node", "ca", node_ext);
  if (s.ok()) {
    s = MakeLeaf(openssl, dir, "client", "shardd client", "ca", client_ext);
  }
  if (s.ok()) {
    s = MakeLeaf(openssl, dir, "rogue", "shardd node", "other-ca", node_ext);
  }
  if (!s.ok()) return s;
  TestCerts certs;
  certs.dir = dir;
  certs.ca = dir + "/ca.pem";
  certs.node_cert = dir + "/node.pem";
  certs.node_key = dir + "/node.key";
  certs.client_cert = dir + "/client.pem";
  certs.client_key = dir + "/client.key";
  certs.other_ca = dir + "/other-ca.pem";
  certs.rogue_cert = dir + "/rogue.pem";
  certs.rogue_key = dir + "/rogue.key";
  return certs;
}

absl::StatusOr<TestPair> GenerateNodePair(const TestCerts& certs,
                                          const std::string& name,
                                          bool other_ca) {
  absl::Status s =
      MakeLeaf(FindOpenssl(), certs.dir, name, "shardd node",
               other_ca ? "other-ca" : "ca", certs.dir + "/node.ext");
  if (!s.ok()) return s;
  TestPair pair;
  pair.cert = absl::StrCat(certs.dir, "/", name, ".pem");
  pair.key = absl::StrCat(certs.dir, "/", name, ".key");
  return pair;
}

}  // namespace shardd::tests
