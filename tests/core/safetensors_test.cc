// The safetensors reader: round trips, and every kind of broken file gives an
// error that names the file (and the tensor), never a crash.
#include "core/safetensors.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "tests/testutil/hf_writer.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

std::string Header(const std::string& json) {
  std::string out(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  return out + json;
}

absl::Status ParseBytes(const std::string& bytes) {
  return ParseSafetensors(absl::MakeConstSpan(
                              reinterpret_cast<const std::byte*>(bytes.data()),
                              bytes.size()),
                          "test.safetensors")
      .status();
}

void ExpectInvalid(const std::string& bytes, const std::string& needle) {
  absl::Status s = ParseBytes(bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("test.safetensors"), std::string::npos) << s;
  EXPECT_NE(s.message().find(needle), std::string::npos)
      << "'" << needle << "' not in: " << s;
}

TEST(Safetensors, WriteThenRead) {
  SafetensorsWriter w;
  w.AddF32("a", {2, 3}, {1, 2, 3, 4, 5, 6});
  w.AddI64("b", {2}, {7, -8});
  w.SetMetadata("config", "{}");
  const std::string dir = testing::MakeTempDir("st_");
  const std::string path = dir + "/t.safetensors";
  ASSERT_TRUE(w.WriteFile(path).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->metadata().at("config"), "{}");
  EXPECT_EQ(*(*f)->ReadF32("a", {2, 3}),
            (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(*(*f)->ReadI64("b"), (std::vector<int64_t>{7, -8}));
  auto wrong = (*f)->ReadF32("a", {3, 2});
  EXPECT_NE(wrong.status().message().find("'a'"), std::string::npos);
  auto missing = (*f)->Get("nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);
  EXPECT_NE(missing.status().message().find(path), std::string::npos);
  fs::remove_all(dir);
}

TEST(Safetensors, ZeroSizedTensorsAndEmptyHeader) {
  EXPECT_TRUE(ParseBytes(Header("{}")).ok());
  EXPECT_TRUE(
      ParseBytes(
          Header(R"({"z":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]}})"))
          .ok());
}

TEST(Safetensors, TooShortForHeaderLength) {
  ExpectInvalid("abc", "too short");
  ExpectInvalid("", "too short");
}

TEST(Safetensors, HeaderLengthPastEnd) {
  std::string b = Header("{}");
  uint64_t n = 1000;
  std::memcpy(b.data(), &n, 8);
  ExpectInvalid(b, "runs past the end");
  n = ~0ull;
  std::memcpy(b.data(), &n, 8);
  ExpectInvalid(b, "exceeds the limit");
}

TEST(Safetensors, TruncatedData) {
  ExpectInvalid(
      Header(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})") +
          std::string(8, '\0'),
      "past the data section");
}

TEST(Safetensors, BadJson) {
  ExpectInvalid(Header("{\"t\": "), "not valid JSON");
  ExpectInvalid(Header("[1,2]"), "not a JSON object");
  ExpectInvalid(Header(R"({"t": 5})"), "'t' is not a JSON object");
}

TEST(Safetensors, WrongByteCountForDtype) {
  ExpectInvalid(
      Header(R"({"t":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}})") +
          std::string(4, '\0'),
      "needs 6");
}

TEST(Safetensors, OverlappingTensors) {
  ExpectInvalid(
      Header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})") +
          std::string(12, '\0'),
      "overlap");
}

TEST(Safetensors, OffsetsOutOfRangeOrReversed) {
  ExpectInvalid(
      Header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})") +
          std::string(8, '\0'),
      "begin 8 > end 4");
  ExpectInvalid(
      Header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})"),
      "data_offsets");
  ExpectInvalid(
      Header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})"),
      "data_offsets");
}

TEST(Safetensors, BadDtypeAndShape) {
  ExpectInvalid(
      Header(R"({"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})"),
      "unknown dtype 'F128'");
  ExpectInvalid(
      Header(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})"),
      "shape entry");
  ExpectInvalid(
      Header(
          R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,0]}})"),
      "overflows");
  ExpectInvalid(Header(R"({"a":{"dtype":"F32","data_offsets":[0,0]}})"),
                "'shape'");
}

TEST(Safetensors, MetadataMustBeStrings) {
  ExpectInvalid(Header(R"({"__metadata__":{"k":1}})"), "is not a string");
  ExpectInvalid(Header(R"({"__metadata__":[1]})"), "__metadata__");
}

TEST(Safetensors, OpenErrors) {
  EXPECT_EQ(SafetensorsFile::Open("/nonexistent/x.safetensors").status().code(),
            absl::StatusCode::kNotFound);
  const std::string dir = testing::MakeTempDir("st_bad_");
  const std::string path = dir + "/bad.safetensors";
  std::ofstream(path) << "garbage!garbage!";
  auto f = SafetensorsFile::Open(path);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find(path), std::string::npos);
  std::ofstream(dir + "/empty.safetensors");
  EXPECT_FALSE(SafetensorsFile::Open(dir + "/empty.safetensors").ok());
  EXPECT_FALSE(SafetensorsFile::Open(dir).ok());  // a directory
  fs::remove_all(dir);
}

TEST(Safetensors, NonFloatTensorToF32IsAnError) {
  SafetensorsWriter w;
  w.AddI64("i", {1}, {1});
  const std::string dir = testing::MakeTempDir("st_i_");
  ASSERT_TRUE(w.WriteFile(dir + "/i.safetensors").ok());
  auto f = SafetensorsFile::Open(dir + "/i.safetensors");
  ASSERT_TRUE(f.ok());
  auto v = (*f)->ReadF32("i");
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*f)->ReadI64("i")->at(0), 1);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moe
