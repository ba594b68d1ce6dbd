#include "formats/ir.h"
#include "formats/op_shapes.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <fstream>

#include "formats/print.h"
#include "formats/target.h"

namespace tilec::ir {
namespace {

std::unique_ptr<fb::ValueT> MakeValue(uint32_t id, const std::string& name,
                                      std::vector<int64_t> shape,
                                      fb::ValueRole role) {
  auto v = std::make_unique<fb::ValueT>();
  v->id = id;
  v->name = name;
  v->shape = std::move(shape);
  v->dtype = fb::DType::F16;
  v->role = role;
  return v;
}

// x[4,8] -> matmul w[8,6] -> gelu -> output.
fb::ModuleT SmallModule() {
  fb::ModuleT m;
  m.values.push_back(MakeValue(0, "x", {4, 8}, fb::ValueRole::Input));
  m.values.push_back(MakeValue(1, "w", {8, 6}, fb::ValueRole::Weight));
  m.values.back()->init = std::make_unique<fb::WeightInitT>();
  m.values.back()->init->seed = 7;
  m.values.back()->init->stddev = 0.5f;
  m.values.push_back(MakeValue(2, "y", {4, 6}, fb::ValueRole::Activation));
  m.values.push_back(MakeValue(3, "z", {4, 6}, fb::ValueRole::Output));
  auto mm = std::make_unique<fb::OperationT>();
  mm->id = 0;
  mm->kind = fb::OpKind::MatMul;
  mm->name = "mm";
  mm->operands = {0, 1};
  mm->results = {2};
  m.ops.push_back(std::move(mm));
  auto gelu = std::make_unique<fb::OperationT>();
  gelu->id = 1;
  gelu->kind = fb::OpKind::Gelu;
  gelu->name = "gelu";
  gelu->operands = {2};
  gelu->results = {3};
  m.ops.push_back(std::move(gelu));
  return m;
}

std::string Serialized(const fb::ModuleT& m) {
  std::string bytes;
  Status s = SerializeModule(m, "test", &bytes);
  EXPECT_TRUE(s.ok()) << s.message();
  return bytes;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

TEST(IrTest, RoundTripIsByteIdentical) {
  std::string bytes = Serialized(SmallModule());
  fb::ModuleT read;
  Status s = ParseModule(bytes, "mem", &read);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(read.schema_version, kSchemaVersion);
  EXPECT_EQ(read.producer, "test");
  ASSERT_EQ(read.values.size(), 4u);
  EXPECT_EQ(read.values[1]->init->seed, 7u);
  EXPECT_EQ(Serialized(read), bytes);
}

TEST(IrTest, JsonRoundTrip) {
  std::string bytes = Serialized(SmallModule());
  std::string json;
  ASSERT_TRUE(ModuleToJson(bytes, &json).ok());
  EXPECT_NE(json.find("\"MatMul\""), std::string::npos);
  std::string back;
  Status s = ModuleFromJson(json, "mem.json", &back);
  ASSERT_TRUE(s.ok()) << s.message();
  fb::ModuleT a, b;
  ASSERT_TRUE(ParseModule(bytes, "a", &a).ok());
  ASSERT_TRUE(ParseModule(back, "b", &b).ok());
  EXPECT_EQ(PrintModule(a), PrintModule(b));
}

TEST(IrTest, RejectsTruncatedAndForeignFiles) {
  std::string bytes = Serialized(SmallModule());
  fb::ModuleT m;
  Status s = ParseModule(bytes.substr(0, 5), "f.tilec", &m);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_NE(s.message().find("f.tilec: truncated"), std::string::npos);

  s = ParseModule(bytes.substr(0, bytes.size() / 2), "f.tilec", &m);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_NE(s.message().find("corrupt IR"), std::string::npos) << s.message();

  std::string foreign = bytes;
  foreign[4] = 'X';
  s = ParseModule(foreign, "f.tilec", &m);
  EXPECT_NE(s.message().find("identifier \"XLC1\""), std::string::npos);

  s = ParseModule("", "f.tilec", &m);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
}

TEST(IrTest, RejectsGarbageBytesWithoutCrashing) {
  std::string bytes = Serialized(SmallModule());
  uint64_t state = 12345;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string damaged = bytes;
    for (int flips = 0; flips < 4; ++flips) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      size_t at = 8 + (state >> 33) % (damaged.size() - 8);
      damaged[at] = static_cast<char>(state >> 17);
    }
    fb::ModuleT m;
    Status s = ParseModule(damaged, "fuzz", &m);
    if (!s.ok()) {
      EXPECT_EQ(s.code(), StatusCode::kBadInput) << s.message();
    }
  }
}

// A [long] vector of two elements that starts `pad` 4-byte words after an
// 8-byte boundary, made by hand: FlatBufferBuilder itself always aligns.
// `b` must track an alignment of 8, so that the buffer's size is a multiple
// of 8 and positions counted from its end (as the builder places data) keep
// their alignment from its start.
flatbuffers::Offset<flatbuffers::Vector<int64_t>> LongsAt(
    flatbuffers::FlatBufferBuilder& b, int pad) {
  // Two int64 elements as four 32-bit words, aligned only to 4 bytes.
  b.StartVector(4 + pad, sizeof(uint32_t));
  for (int i = 0; i < pad; ++i) b.PushElement<uint32_t>(0);
  for (uint32_t word : {4u, 0u, 8u, 0u}) b.PushElement(word);
  return flatbuffers::Offset<flatbuffers::Vector<int64_t>>(b.EndVector(2));
}

std::string Finished(flatbuffers::FlatBufferBuilder& b,
                     fb::ModuleBuilder& module) {
  module.add_schema_version(kSchemaVersion);
  fb::FinishModuleBuffer(b, module.Finish());
  return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()),
                     b.GetSize());
}

// A module whose one value's shape ([long]) is LongsAt(pad).
std::string ModuleWithShapeAt(int pad) {
  flatbuffers::FlatBufferBuilder b;
  b.TrackMinAlign(8);
  auto name = b.CreateString("x");
  auto shape = LongsAt(b, pad);
  fb::ValueBuilder value(b);
  value.add_name(name);
  value.add_shape(shape);
  auto value_offset = value.Finish();
  auto values = b.CreateVector(&value_offset, 1);
  fb::ModuleBuilder module(b);
  module.add_values(values);
  return Finished(b, module);
}

// How many of the modules make(0) and make(1) ParseModule refuses as
// misaligned, each naming `field` (exactly one of the two paddings puts
// the elements off 8 bytes).
int RefusedAsMisaligned(std::string (*make)(int), const std::string& field) {
  int refused = 0;
  for (int pad : {0, 1}) {
    fb::ModuleT m;
    Status s = ParseModule(make(pad), "hand.tilec", &m);
    if (s.message().find("not 8-byte aligned") != std::string::npos) {
      ++refused;
      EXPECT_EQ(s.code(), StatusCode::kBadInput);
      EXPECT_NE(s.message().find("hand.tilec: corrupt IR: " + field),
                std::string::npos)
          << s.message();
    }
  }
  return refused;
}

TEST(IrTest, RefusesMisalignedEightByteVectors) {
  EXPECT_EQ(RefusedAsMisaligned(ModuleWithShapeAt, "Value.shape"), 1);
}

// The same three levels down: a compute's params ([long]) in the program's
// first superstep are LongsAt(pad).
std::string ProgramWithParamsAt(int pad) {
  flatbuffers::FlatBufferBuilder b;
  b.TrackMinAlign(8);
  auto params = LongsAt(b, pad);
  fb::ComputeBuilder compute(b);
  compute.add_params(params);
  auto compute_offset = compute.Finish();
  auto computes = b.CreateVector(&compute_offset, 1);
  fb::SuperstepBuilder step(b);
  step.add_compute(computes);
  auto step_offset = step.Finish();
  auto steps = b.CreateVector(&step_offset, 1);
  fb::DeviceProgramBuilder program(b);
  program.add_supersteps(steps);
  auto program_offset = program.Finish();
  fb::ModuleBuilder module(b);
  module.add_program(program_offset);
  return Finished(b, module);
}

TEST(IrTest, RefusesMisalignedEightByteVectorsDeepInTheProgram) {
  EXPECT_EQ(RefusedAsMisaligned(ProgramWithParamsAt, "Compute.params"), 1);
}

TEST(IrTest, RefusesNewerVersionByName) {
  fb::ModuleT m = SmallModule();
  m.schema_version = kSchemaVersion + 1;
  m.producer = "tilec-future";
  flatbuffers::FlatBufferBuilder builder;
  builder.Finish(fb::Module::Pack(builder, &m), kFileIdentifier);
  std::string bytes(reinterpret_cast<const char*>(builder.GetBufferPointer()),
                    builder.GetSize());
  fb::ModuleT read;
  Status s = ParseModule(bytes, "new.tilec", &read);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_NE(s.message().find("schema version " +
                             std::to_string(kSchemaVersion + 1)),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("tilec-future"), std::string::npos);
}

TEST(IrTest, VerifierRejectsStructuralErrors) {
  {
    fb::ModuleT m = SmallModule();
    m.ops[1]->operands = {9};
    Status s = VerifyModule(m);
    EXPECT_NE(s.message().find("op 1 (gelu) uses undefined value %9"),
              std::string::npos)
        << s.message();
  }
  {
    fb::ModuleT m = SmallModule();
    std::swap(m.ops[0], m.ops[1]);
    Status s = VerifyModule(m);
    EXPECT_NE(s.message().find("before it is defined"), std::string::npos)
        << s.message();
  }
  {
    fb::ModuleT m = SmallModule();
    m.ops[1]->id = 0;
    EXPECT_NE(VerifyModule(m).message().find("used twice"), std::string::npos);
  }
  {
    fb::ModuleT m = SmallModule();
    m.values[1]->shape = {7, 6};
    Status s = VerifyModule(m);
    EXPECT_NE(s.message().find("disagree on K"), std::string::npos)
        << s.message();
  }
  {
    fb::ModuleT m = SmallModule();
    m.values[3]->shape = {4, 5};
    EXPECT_FALSE(VerifyModule(m).ok());
  }
  {
    fb::ModuleT m = SmallModule();
    m.ops[1]->kind = static_cast<fb::OpKind>(999);
    EXPECT_NE(VerifyModule(m).message().find("unknown kind 999"),
              std::string::npos);
  }
  {
    fb::ModuleT m = SmallModule();
    m.ops.pop_back();
    EXPECT_NE(VerifyModule(m).message().find("never defined"),
              std::string::npos);
  }
  {
    fb::ModuleT m = SmallModule();
    m.target = std::make_unique<fb::TargetT>();
    ASSERT_TRUE(LoadTarget("tiny", m.target.get()).ok());  // 16 tiles
    m.values[2]->ownership = std::make_unique<fb::OwnershipT>();
    m.values[2]->ownership->partitions = {4, 5};
    Status s = VerifyModule(m);
    EXPECT_NE(s.message().find("uses tile 19"), std::string::npos)
        << s.message();
  }
}

TEST(IrTest, SerializeRefusesInvalidModule) {
  fb::ModuleT m = SmallModule();
  m.ops[1]->operands = {9};
  std::string bytes;
  EXPECT_EQ(SerializeModule(m, "t", &bytes).code(), StatusCode::kInternal);
}

TEST(IrTest, AtomicWriteReplacesWholeFile) {
  std::string path = TempPath("atomic.tilec");
  ASSERT_TRUE(WriteFileAtomically(path, "old contents").ok());
  ASSERT_TRUE(WriteModule(SmallModule(), "t", path).ok());
  fb::ModuleT m;
  EXPECT_TRUE(ReadModule(path, &m).ok());
}

TEST(IrTest, WrittenBytesAreTheSerializedOnesWhenTheBuilderGrows) {
  // Megabytes of decisions: the builder's buffer grows many times, moving
  // its pages (WriteModule's allocator) with scratch data at its start.
  fb::ModuleT m = SmallModule();
  auto run = std::make_unique<fb::PassRunT>();
  run->pass = "grow";
  for (int i = 0; i < 20000; ++i) {
    auto d = std::make_unique<fb::DecisionT>();
    d->ops = {static_cast<uint32_t>(i % 2)};
    d->action = "decision " + std::to_string(i);
    d->reason = std::string(static_cast<size_t>(i % 97), 'r');
    run->decisions.push_back(std::move(d));
  }
  m.log.push_back(std::move(run));
  const std::string expected = Serialized(m);
  ASSERT_GT(expected.size(), size_t{1} << 20);
  const std::string path = TempPath("grown.tilec");
  ASSERT_TRUE(WriteModule(std::move(m), "test", path).ok());
  std::string written;
  ASSERT_TRUE(ReadFile(path, &written).ok());
  EXPECT_TRUE(written == expected);
}

TEST(IrTest, FailedWriteLeavesOldFileIntact) {
  std::string path = TempPath("intact.tilec");
  ASSERT_TRUE(WriteFileAtomically(path, "old contents").ok());
  // Block the temporary file's name so the write fails part way.
  std::string temp = TempPathFor(path);
  ASSERT_EQ(mkdir(temp.c_str(), 0755), 0);
  Status s = WriteModule(SmallModule(), "t", path);
  rmdir(temp.c_str());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(path), std::string::npos);
  std::string contents;
  ASSERT_TRUE(ReadFile(path, &contents).ok());
  EXPECT_EQ(contents, "old contents");

  // An invalid module is refused before anything is written.
  fb::ModuleT bad = SmallModule();
  bad.ops.clear();
  EXPECT_FALSE(WriteModule(bad, "t", path).ok());
  ASSERT_TRUE(ReadFile(path, &contents).ok());
  EXPECT_EQ(contents, "old contents");
}

TEST(IrTest, FilesAModelNamesStayInsideItsDirectory) {
  const std::string root = TempPath("confine");
  const std::string dir = root + "/model";
  ASSERT_EQ(system(("rm -rf " + root + " && mkdir -p " + dir + "/sub " +
                    root + "/outside").c_str()),
            0);
  ASSERT_TRUE(WriteFileAtomically(dir + "/w.bin", "in").ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/sub/w.bin", "in").ok());
  ASSERT_TRUE(WriteFileAtomically(root + "/outside/secret", "out").ok());
  ASSERT_EQ(symlink("../outside/secret", (dir + "/out.bin").c_str()), 0);
  ASSERT_EQ(symlink("w.bin", (dir + "/in.bin").c_str()), 0);
  std::string resolved;
  for (const char* inside : {"w.bin", "sub/w.bin", "sub/../w.bin", "in.bin"}) {
    EXPECT_TRUE(ResolveInside(dir, inside, "x", &resolved).ok()) << inside;
  }
  for (std::string outside :
       {std::string("../outside/secret"), std::string("out.bin"),
        root + "/outside/secret", std::string("sub/../../outside/secret"),
        std::string("sub"), std::string("missing"), std::string("")}) {
    Status s = ResolveInside(dir, outside, "x", &resolved);
    EXPECT_EQ(s.code(), StatusCode::kBadInput) << outside;
  }
  EXPECT_TRUE(IsPlainFileName("m.tilec.weights"));
  for (const char* name : {"", ".", "..", "a/b", "/etc/passwd"}) {
    EXPECT_FALSE(IsPlainFileName(name)) << name;
  }
}

TEST(IrTest, LoadsTargetPresets) {
  fb::TargetT ipu;
  Status s = LoadTarget("ipu21", &ipu);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(ipu.tiles, 1472);
  EXPECT_EQ(ipu.reserved_bytes, 0);
  EXPECT_EQ(MaxTileTensorBytes(ipu), 638976 - 49152);
  EXPECT_EQ(ipu.clock_hz, 1.5e9);
  EXPECT_EQ(ipu.amp_macs_fp8, 128);
  EXPECT_EQ(ipu.sync_cycles, 277);
  EXPECT_EQ(ipu.standard_elements * ipu.element_bytes, 208 * 1024);
  EXPECT_FALSE(ipu.kernels.empty());
  fb::TargetT tiny;
  ASSERT_TRUE(LoadTarget("tiny", &tiny).ok());
  EXPECT_EQ(tiny.tiles, 16);
  EXPECT_EQ(MaxTileTensorBytes(tiny), 64 * 1024);
}

TEST(IrTest, TargetErrorsNameTheInput) {
  fb::TargetT t;
  Status s = LoadTarget("ipu99", &t);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_NE(s.message().find("ipu99"), std::string::npos);
  s = ParseTargetJson("{ tiles: 4, bogus_field: 1 }", "my.json", &t);
  EXPECT_NE(s.message().find("my.json"), std::string::npos);
  s = ParseTargetJson("{ tiles: 0 }", "zero.json", &t);
  EXPECT_NE(s.message().find("zero.json"), std::string::npos);
}

// Issue 8, items 3, 6 and 12: the verifier bounds sizes and attributes
// before any tool allocates or computes with them.
TEST(IrTest, VerifierBoundsValuesAndAttributes) {
  fb::ModuleT m = SmallModule();
  ASSERT_TRUE(VerifyModule(m).ok());
  m.values[0]->shape = {int64_t{1} << 40, 8};
  Status s = VerifyModule(m);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_NE(s.message().find("more than 2147483648 elements"),
            std::string::npos)
      << s.message();
  // Overflowing products are caught before they wrap.
  m.values[0]->shape = {int64_t{1} << 32, int64_t{1} << 32};
  EXPECT_EQ(VerifyModule(m).code(), StatusCode::kBadInput);

  // Well formed but larger than every tile's memory together: exit 3.
  m = SmallModule();
  m.target = std::make_unique<fb::TargetT>();
  ASSERT_TRUE(LoadTarget("tiny", m.target.get()).ok());
  ASSERT_TRUE(VerifyModule(m).ok());
  m.values[0]->shape = {1 << 20, 8};  // 16 MiB of F16 > 16 x 56 KiB
  s = VerifyModule(m);
  EXPECT_EQ(s.code(), StatusCode::kInfeasible) << s.message();
  EXPECT_NE(s.message().find("target 'tiny'"), std::string::npos);
  // The writer passes "does not fit" on as such, not as its own bug.
  std::string bytes;
  EXPECT_EQ(SerializeModule(m, "test", &bytes).code(),
            StatusCode::kInfeasible);

  // The module's own target is validated like a loaded one.
  m = SmallModule();
  m.target = std::make_unique<fb::TargetT>();
  ASSERT_TRUE(LoadTarget("tiny", m.target.get()).ok());
  m.target->workers = 0;
  s = VerifyModule(m);
  EXPECT_EQ(s.code(), StatusCode::kBadInput);
  EXPECT_NE(s.message().find("workers"), std::string::npos) << s.message();

  m = SmallModule();
  m.ops[1]->kind = fb::OpKind::LayerNorm;  // shapes are wrong too: eps first
  m.ops[1]->eps = -1;
  s = VerifyModule(m);
  EXPECT_NE(s.message().find("eps"), std::string::npos) << s.message();
  m = SmallModule();
  m.ops[1]->scale = NAN;
  EXPECT_NE(VerifyModule(m).message().find("scale is not finite"),
            std::string::npos);
  m = SmallModule();
  m.values[1]->init->stddev = -1;
  EXPECT_NE(VerifyModule(m).message().find("stddev"), std::string::npos);
  m = SmallModule();
  m.values[0]->fp8_scale_exp = 3;  // on an F16 value
  EXPECT_NE(VerifyModule(m).message().find("fp8_scale_exp"),
            std::string::npos);
}

// A declared shape holds the value's elements in the model's own shape;
// one that holds another count, or overflows on the way, is refused.
TEST(IrTest, DeclaredShapeHoldsTheValuesElements) {
  fb::ModuleT m = SmallModule();
  const std::vector<int64_t> rows = m.values[0]->shape;
  m.values[0]->declared_shape = {1, rows[0], rows[1]};
  ASSERT_TRUE(VerifyModule(m).ok());
  EXPECT_EQ(DeclaredShape(*m.values[0]), m.values[0]->declared_shape);
  EXPECT_EQ(DeclaredShape(*m.values[1]), m.values[1]->shape);
  EXPECT_NE(PrintModule(m).find(" declared=[1," + std::to_string(rows[0]) +
                                    "," + std::to_string(rows[1]) + "]"),
            std::string::npos);
  for (const std::vector<int64_t>& bad :
       {std::vector<int64_t>{2, rows[0], rows[1]},
        std::vector<int64_t>{0, rows[0]},
        std::vector<int64_t>{int64_t{1} << 32, int64_t{1} << 32}}) {
    m.values[0]->declared_shape = bad;
    const Status s = VerifyModule(m);
    EXPECT_EQ(s.code(), StatusCode::kBadInput);
    EXPECT_NE(s.message().find("value %0: declared shape " +
                               ShapeToString(bad) + " does not hold the"),
              std::string::npos)
        << s.message();
  }
}

// The importers' one rule: the model's shape is declared only where it is
// not the value's own, so a value whose files need no other shape has none.
TEST(IrTest, DeclareModelShapeOnlyWhereItDiffers) {
  fb::ValueT v;
  v.shape = {729, 1152};
  DeclareModelShape({729, 1152}, &v);
  EXPECT_TRUE(v.declared_shape.empty());
  DeclareModelShape({1, 729, 1152}, &v);
  EXPECT_EQ(v.declared_shape, (std::vector<int64_t>{1, 729, 1152}));
  EXPECT_EQ(DeclaredShape(v), v.declared_shape);
}

TEST(IrTest, TargetValidatorBoundsSizes) {
  fb::TargetT t;
  ASSERT_TRUE(LoadTarget("ipu21", &t).ok());
  EXPECT_TRUE(ValidateTarget(t).ok());
  fb::TargetT big = t;
  big.tiles = 268435456;
  EXPECT_NE(ValidateTarget(big).message().find("tiles = 268435456"),
            std::string::npos);
  big = t;
  big.standard_elements = 1 << 20;
  EXPECT_NE(ValidateTarget(big).message().find("standard_elements"),
            std::string::npos);
  big = t;
  big.kernels.clear();
  EXPECT_NE(ValidateTarget(big).message().find("lacks kernel formula"),
            std::string::npos);
  // Exchange numbers that 32-bit schedules could not hold.
  big = t;
  big.exchange_max_packet_words = 1 << 20;
  EXPECT_NE(ValidateTarget(big).message().find(
                "exchange_max_packet_words = 1048576 is more than"),
            std::string::npos);
  big = t;
  big.exchange_fragment_cycles = 1 << 13;
  EXPECT_NE(ValidateTarget(big).message().find("exchange_fragment_cycles"),
            std::string::npos);
  big = t;
  big.exchange_route_latency_per_row = 1 << 16;
  EXPECT_NE(ValidateTarget(big).message().find("farthest tile's route latency"),
            std::string::npos);
}

TEST(IrTest, PrintIsStable) {
  fb::ModuleT m;
  ASSERT_TRUE(ParseModule(Serialized(SmallModule()), "m", &m).ok());
  std::string text = PrintModule(m);
  EXPECT_NE(text.find("(0) mat_mul mm: %2 = %0, %1 : f16[4,6]"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("init=gaussian(mean=0, stddev=0.5) seed=7"),
            std::string::npos)
      << text;
  EXPECT_EQ(NumberText(1e-6), "1e-06");
  EXPECT_EQ(NumberText(0.1f), "0.1");
  EXPECT_EQ(NumberText(0.1), "0.1");
  EXPECT_EQ(NumberText(1e-6f), "1e-06");
}

// x[4,8] -> copy_rows: row 3 then rows 0..1 -> y[3,8].
fb::ModuleT CopyRowsModule() {
  fb::ModuleT m;
  m.values.push_back(MakeValue(0, "x", {4, 8}, fb::ValueRole::Input));
  m.values.push_back(MakeValue(1, "y", {3, 8}, fb::ValueRole::Output));
  auto op = std::make_unique<fb::OperationT>();
  op->id = 0;
  op->kind = fb::OpKind::CopyRows;
  op->name = "pick";
  op->operands = {0};
  op->results = {1};
  AppendRowSegment({0, 3, 1, 0}, op.get());
  AppendRowSegment({0, 0, 2, 1}, op.get());
  m.ops.push_back(std::move(op));
  return m;
}

TEST(IrTest, CopyRowsVerifiesAndPrints) {
  fb::ModuleT m;
  ASSERT_TRUE(ParseModule(Serialized(CopyRowsModule()), "m", &m).ok());
  EXPECT_NE(PrintModule(m).find("(0) copy_rows pick: %1 = %0 : f16[3,8] "
                                "rows=[0:3+1@0, 0:0+2@1]"),
            std::string::npos)
      << PrintModule(m);
  {
    fb::ModuleT bad = CopyRowsModule();
    bad.ops[0]->rows[1]->at = 2;
    EXPECT_NE(VerifyModule(bad).message().find(
                  "op 0 (CopyRows pick): segment 1 (operand 0 rows 0+2 at 2) "
                  "starts at row 2, expected 1"),
              std::string::npos)
        << VerifyModule(bad).message();
  }
  {
    fb::ModuleT bad = CopyRowsModule();
    bad.values[1]->dtype = fb::DType::F32;
    EXPECT_NE(VerifyModule(bad).message().find(
                  "op 0 (pick): operand 0 is F16 scale 0, result is F32 "
                  "scale 0 (CopyRows keeps dtype and scale)"),
              std::string::npos)
        << VerifyModule(bad).message();
  }
  {
    fb::ModuleT bad = CopyRowsModule();
    bad.ops[0]->kind = fb::OpKind::Redistribute;
    bad.values[1]->shape = {4, 8};
    EXPECT_NE(VerifyModule(bad).message().find(
                  "has row segments but is not CopyRows"),
              std::string::npos);
  }
  {
    fb::ModuleT bad = CopyRowsModule();
    bad.ops[0]->rows[0].reset();
    EXPECT_NE(VerifyModule(bad).message().find("null row segment"),
              std::string::npos);
  }
}

// SmallModule's gelu as a Fused op of general steps: sigmoid, then a [6]
// row (value 4) divided by it.
TEST(IrTest, GeneralElementwiseStepsVerifyAndPrint) {
  fb::ModuleT m = SmallModule();
  m.values.push_back(MakeValue(4, "row", {6}, fb::ValueRole::Input));
  fb::OperationT& op = *m.ops[1];
  op.kind = fb::OpKind::Fused;
  op.operands.push_back(4);
  auto unary = std::make_unique<fb::FusedStepT>();
  unary->kind = fb::FusedStepKind::Unary;
  unary->fn = fb::ElementwiseFn::Sigmoid;
  op.body.push_back(std::move(unary));
  auto binary = std::make_unique<fb::FusedStepT>();
  binary->kind = fb::FusedStepKind::Binary;
  binary->fn = fb::ElementwiseFn::Div;
  binary->operand = 1;
  binary->broadcast = fb::Broadcast::Row;
  binary->operand_first = true;
  op.body.push_back(std::move(binary));
  fb::ModuleT read;
  ASSERT_TRUE(ParseModule(Serialized(m), "m", &read).ok());
  EXPECT_NE(PrintModule(read).find(
                "body=[unary.sigmoid, binary.div.row.operand_first[1]]"),
            std::string::npos)
      << PrintModule(read);
  op.body[1]->fn = static_cast<fb::ElementwiseFn>(10);
  EXPECT_NE(VerifyModule(m).message().find(
                "body step 1: unknown elementwise function 10"),
            std::string::npos)
      << VerifyModule(m).message();
  op.body[1]->fn = fb::ElementwiseFn::Div;
  // A column broadcast prints as such (Broadcast.Column, appended as 2).
  op.body[1]->broadcast = fb::Broadcast::Column;
  EXPECT_NE(PrintModule(m).find("binary.div.column.operand_first[1]"),
            std::string::npos)
      << PrintModule(m);
  op.body[1]->broadcast = static_cast<fb::Broadcast>(3);
  EXPECT_NE(VerifyModule(m).message().find("body step 1: unknown broadcast 3"),
            std::string::npos)
      << VerifyModule(m).message();
}

}  // namespace
}  // namespace tilec::ir
