#include "daemon/state/state_import.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shardd/v1/trainer.pb.h"

// StateImport against real engines: state_import_engine_test.cc; against
// real clusters: tests/faults/resume_test.sh (resume bit-equal, other W and
// F exact, FULL and SHARDED exports, a torch-style file, a truncated file).
// Here the request's validation.
namespace shardd::state {
namespace {

using ::testing::HasSubstr;

TEST(ImportSourcesTest, TakesTheFlagOnlyWhenTheRequestNamesNoSource) {
  v1::RegisterModelRequest request;
  auto flag = ImportSources::FromRequest(request, "/ckpt");
  ASSERT_TRUE(flag.ok()) << flag.status();
  EXPECT_EQ(flag->resume_from, "/ckpt");
  EXPECT_FALSE(flag->empty());
  request.set_load_from("/model.safetensors");
  auto own = ImportSources::FromRequest(request, "/ckpt");
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->load_from, "/model.safetensors");
  EXPECT_TRUE(own->resume_from.empty());
  EXPECT_TRUE(
      ImportSources::FromRequest(v1::RegisterModelRequest(), "")->empty());
}

TEST(ImportSourcesTest, RejectsBothSourcesAndRelativePaths) {
  v1::RegisterModelRequest both;
  both.set_load_from("/a");
  both.set_resume_from("/b");
  auto s = ImportSources::FromRequest(both, "");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("load_from, resume_from"));

  v1::RegisterModelRequest relative;
  relative.set_resume_from("ckpt");
  s = ImportSources::FromRequest(relative, "");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("resume_from: must be absolute"));
}

TEST(ImportSourcesTest, CollectsTensorFilesNamingTheFieldOfABadOne) {
  v1::RegisterModelRequest request;
  v1::UnitSpec* unit = request.mutable_model()->add_units();
  unit->add_tensors();
  v1::FileInit* file = unit->add_tensors()->mutable_init()->mutable_file();
  file->set_path("/w.safetensors");
  file->set_tensor("encoder.weight");
  auto s = ImportSources::FromRequest(request, "");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->tensor_files.size(), 1u);
  EXPECT_EQ(s->tensor_files[0].unit, 0);
  EXPECT_EQ(s->tensor_files[0].tensor, 1);
  EXPECT_EQ(s->tensor_files[0].name, "encoder.weight");

  file->set_path("w.safetensors");
  s = ImportSources::FromRequest(request, "");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(),
              HasSubstr("model.units[0].tensors[1].init.file.path"));
}

}  // namespace
}  // namespace shardd::state
