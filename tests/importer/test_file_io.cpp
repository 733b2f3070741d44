// The one writer (importer/output_file.h), the one reader (importer/input_file.h), the per-command
// bookkeeping that keeps outputs off inputs (importer/file_claims.h) and what happens on a signal
// (importer/signal_cleanup.h). Tests that need root (a device node of their own) skip without it;
// none of them writes to a real device.
#include <fcntl.h>
#include <gtest/gtest.h>
#include "temp_dir.h"
#include "onnx/onnx-ml.pb.h"
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "importer/file_claims.h"
#include "importer/input_file.h"
#include "importer/mapped_file.h"
#include "importer/npy.h"
#include "importer/output_file.h"
#include "importer/signal_cleanup.h"
#include "importer/tensor_proto.h"
#include "ir/error.h"
#include "ir/memory_limit.h"

using namespace fusec;
using fusec::test::temp_dir;
namespace fs = std::filesystem;

namespace {

std::string read_all(const fs::path& f) {
  std::ifstream in(f, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void put(const fs::path& f, const std::string& text) { std::ofstream(f, std::ios::binary) << text; }

ino_t inode(const fs::path& f) {
  struct stat st {};
  return ::stat(f.c_str(), &st) == 0 ? st.st_ino : 0;
}

/// The names in `dir` (hidden temporaries included).
std::vector<std::string> names(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

/// The message of the BadInput `f` throws ("" and a test failure if it throws none or another kind).
template <typename F>
std::string bad_input_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

/// Sets the host memory limit for one scope.
struct MemoryLimit {
  size_t saved = host_memory().limit();
  explicit MemoryLimit(size_t bytes) { host_memory().set_limit(bytes); }
  ~MemoryLimit() { host_memory().set_limit(saved); }
};

/// A .npy header declaring `shape` (e.g. "(2, 500000000)") of float32, followed by `data_bytes` zeros.
std::string npy_bytes(const std::string& shape, size_t data_bytes) {
  std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
  h += '\n';
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  out += static_cast<char>(h.size() & 0xff);
  out += static_cast<char>(h.size() >> 8);
  return out + h + std::string(data_bytes, '\0');
}

}  // namespace

// ---- file_claims: no output on an input or on another output ----

TEST(FileClaims, DescriptorNames) {
  EXPECT_EQ(named_descriptor("-"), 1);
  EXPECT_EQ(named_descriptor("/dev/stdout"), 1);
  EXPECT_EQ(named_descriptor("/dev/stderr"), 2);
  EXPECT_EQ(named_descriptor("/dev/fd/7"), 7);
  EXPECT_EQ(named_descriptor("/proc/self/fd/12"), 12);
  EXPECT_EQ(named_descriptor("/dev/fd/x"), -1);
  EXPECT_EQ(named_descriptor("/dev/fd/"), -1);
  EXPECT_EQ(named_descriptor("out.json"), -1);
  EXPECT_EQ(named_descriptor("./-"), -1);
}

TEST(FileClaims, AnOutputMayNotBeAnInputByAnyName) {
  fs::path d = temp_dir("io_claims_input");
  put(d / "m.onnx", "model");
  fs::create_symlink("m.onnx", d / "link.onnx");
  fs::create_hard_link(d / "m.onnx", d / "hard.onnx");
  CommandFiles files;
  note_input(d / "m.onnx", "the input model");
  for (const fs::path& p : {d / "m.onnx", d / "link.onnx", d / "hard.onnx", d / "." / "m.onnx"}) {
    const std::string msg = bad_input_of([&] { claim_output(p.string(), "--report"); });
    EXPECT_NE(msg.find("--report '" + p.string() + "' is the input model"), std::string::npos) << msg;
  }
  claim_output((d / "other.json").string(), "--report");  // anything else is fine
  EXPECT_EQ(read_all(d / "m.onnx"), "model");
  fs::remove_all(d);
}

TEST(FileClaims, AClaimMadeBeforeTheInputIsReadStillCounts) {
  fs::path d = temp_dir("io_claims_order");
  put(d / "w.data", "weights");
  CommandFiles files;
  claim_output((d / "w.data").string(), "the output model's external data");
  const std::string msg = bad_input_of([&] { InputFile in(d / "w.data", {"the external data of m.onnx"}); });
  EXPECT_NE(msg.find("is the external data of m.onnx; fusec does not write over its own inputs"), std::string::npos)
      << msg;
  fs::remove_all(d);
}

TEST(FileClaims, TwoOutputsMayNotShareAFile) {
  fs::path d = temp_dir("io_claims_outputs");
  CommandFiles files;
  claim_output((d / "r.json").string(), "--report");
  const std::string msg = bad_input_of([&] { claim_output((d / "." / "r.json").string(), "--html"); });
  EXPECT_NE(msg.find("--html '" + (d / "." / "r.json").string() + "' is also --report"), std::string::npos) << msg;
  // The writer takes over the claim made for it, once; a second write of the file is refused.
  write_output_file(d / "r.json", "{}");
  const std::string twice = bad_input_of([&] { write_output_file(d / "r.json", "{}"); });
  EXPECT_NE(twice.find("would be written twice"), std::string::npos) << twice;
  // A descriptor is one output too, whatever it is called (stderr here: a claim of stdout would
  // move this test binary's own output).
  const std::string out = bad_input_of([&] {
    claim_output("/dev/stderr", "--json");
    claim_output("/dev/fd/2", "--markdown");
  });
  EXPECT_NE(out.find("is also --json"), std::string::npos) << out;
  fs::remove_all(d);
}

TEST(FileClaims, ReadingBackItsOwnOutputAndRewritingACacheAreFine) {
  fs::path d = temp_dir("io_claims_fine");
  CommandFiles files;
  write_output_file(d / "o.onnx", "model");
  InputFile back(d / "o.onnx", {"the input model"});  // optimize loads what it wrote
  const OutputOptions cache{"the cache", true, true};
  write_output_file(d / "peaks.json", "1", cache);
  write_output_file(d / "peaks.json", "2", cache);
  EXPECT_EQ(read_all(d / "peaks.json"), "2");
  fs::remove_all(d);
}

TEST(FileClaims, WithoutACommandNothingIsChecked) {
  // A library caller may replace its own input (the map keeps the old inode).
  fs::path d = temp_dir("io_claims_none");
  put(d / "m.onnx", "model");
  ASSERT_EQ(CommandFiles::current(), nullptr);
  InputFile in(d / "m.onnx");
  write_output_file(d / "m.onnx", "new");
  EXPECT_EQ(read_all(d / "m.onnx"), "new");
  fs::remove_all(d);
}

// ---- output_file: what each kind of destination gets ----

TEST(OutputFile, ARegularFileIsReplacedWholeKeepingItsMode) {
  fs::path d = temp_dir("io_out_regular");
  put(d / "r.json", "old");
  ::chmod((d / "r.json").c_str(), 0600);
  const ino_t before = inode(d / "r.json");
  {
    OutputFile f(d / "r.json");
    f.write("half");
    EXPECT_FALSE(f.in_place());
    EXPECT_EQ(read_all(d / "r.json"), "old");  // nothing there changes until commit
  }                                            // no commit: an error or an interrupt
  EXPECT_EQ(read_all(d / "r.json"), "old");
  EXPECT_EQ(names(d), std::vector<std::string>{"r.json"}) << "a temporary was left behind";
  write_output_file(d / "r.json", "new");
  EXPECT_EQ(read_all(d / "r.json"), "new");
  EXPECT_NE(inode(d / "r.json"), before) << "replaced by rename, not rewritten in place";
  EXPECT_EQ(fs::status(d / "r.json").permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  // A name at NAME_MAX still leaves room for its temporary.
  const std::string longest(255, 'x');
  write_output_file(d / longest, "long");
  EXPECT_EQ(read_all(d / longest), "long");
  fs::remove_all(d);
}

TEST(OutputFile, ALinkTheUserNamedHasItsTargetReplaced) {
  fs::path d = temp_dir("io_out_named_link");
  fs::create_directories(d / "runs");
  put(d / "runs" / "1.json", "old");
  fs::create_symlink("runs/1.json", d / "latest.json");
  write_output_file(d / "latest.json", "new");
  EXPECT_TRUE(fs::is_symlink(d / "latest.json"));
  EXPECT_EQ(read_all(d / "runs" / "1.json"), "new");
  EXPECT_EQ(names(d / "runs"), std::vector<std::string>{"1.json"});
  // A link to nothing is an error, not a file created somewhere.
  fs::create_symlink("missing/x.json", d / "dangling.json");
  EXPECT_NE(bad_input_of([&] { write_output_file(d / "dangling.json", "x"); }).find("does not exist"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(d / "missing"));
  fs::remove_all(d);
}

TEST(OutputFile, ALinkFusecDidNotNameIsReplacedNotFollowed) {
  fs::path d = temp_dir("io_out_derived_link");
  fs::create_directories(d / "out");
  put(d / "precious.txt", "precious");
  fs::create_symlink("../precious.txt", d / "out" / "output_0.pb");
  write_output_file(d / "out" / "output_0.pb", "tensor", {"output_0", /*user_named=*/false, false});
  EXPECT_EQ(read_all(d / "precious.txt"), "precious");
  EXPECT_FALSE(fs::is_symlink(d / "out" / "output_0.pb"));
  EXPECT_EQ(read_all(d / "out" / "output_0.pb"), "tensor");
  fs::remove_all(d);
}

TEST(OutputFile, FoldersAndMissingFoldersAreErrors) {
  fs::path d = temp_dir("io_out_folders");
  EXPECT_NE(bad_input_of([&] { write_output_file(d, "x"); }).find("it is a folder"), std::string::npos);
  const std::string msg = bad_input_of([&] { write_output_file(d / "no" / "r.json", "x"); });
  EXPECT_NE(msg.find("folder '" + (d / "no").string() + "'"), std::string::npos) << msg;
  EXPECT_NE(bad_input_of([&] { write_output_file(d / std::string(300, 'x'), "x"); }).find("File name too long"),
            std::string::npos);
  fs::create_symlink("loop", d / "loop");
  EXPECT_NE(bad_input_of([&] { write_output_file(d / "loop" / "x.onnx", "x"); }).find("symbolic links"),
            std::string::npos);
  fs::remove_all(d);
}

TEST(OutputFile, AFifoIsWrittenInPlaceAndOneWithoutAReaderIsAnError) {
  fs::path d = temp_dir("io_out_fifo");
  const fs::path fifo = d / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Nobody reading: an error at once, not a hang.
  EXPECT_NE(bad_input_of([&] { write_output_file(fifo, "x"); }).find("no process is reading"), std::string::npos);
  std::string got;
  std::thread reader([&] {
    std::ifstream in(fifo, std::ios::binary);  // blocks until the writer opens
    got.assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  });
  for (int i = 0;; ++i) {  // the reader opens the FIFO when its thread gets to it
    try {
      OutputFile f(fifo);
      EXPECT_TRUE(f.in_place());
      f.write("through the fifo");
      f.commit();
      break;
    } catch (const Error&) {
      ASSERT_LT(i, 500) << "the reader never opened the FIFO";
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  reader.join();
  EXPECT_EQ(got, "through the fifo");
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_EQ(names(d), std::vector<std::string>{"fifo"});
  fs::remove_all(d);
}

TEST(OutputFile, ADescriptorIsWrittenInPlace) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  write_output_file("/dev/fd/" + std::to_string(p[1]), "on the pipe");
  ::close(p[1]);
  char buf[64] = {};
  EXPECT_EQ(::read(p[0], buf, sizeof buf), 11);
  EXPECT_STREQ(buf, "on the pipe");
  ::close(p[0]);
  // `-` is stdout (here swapped for a pipe for the test's sake).
  ASSERT_EQ(::pipe(p), 0);
  std::fflush(stdout);
  const int saved = ::dup(1);
  ::dup2(p[1], 1);
  write_output_file("-", "on stdout");
  ::dup2(saved, 1);
  ::close(saved);
  ::close(p[1]);
  char out[64] = {};
  EXPECT_EQ(::read(p[0], out, sizeof out), 9);
  EXPECT_STREQ(out, "on stdout");
  ::close(p[0]);
}

TEST(OutputFile, ADeviceIsWrittenInPlace) {
  // A null device node of the test's own (never /dev's): if the writer wrongly renamed over it,
  // only this copy would turn into a file.
  fs::path d = temp_dir("io_out_device");
  const fs::path dev = d / "null";
  if (::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
    fs::remove_all(d);
    GTEST_SKIP() << "cannot make a device node here (needs root): " << std::strerror(errno);
  }
  const int probe = ::open(dev.c_str(), O_WRONLY);
  if (probe < 0) {
    fs::remove_all(d);
    GTEST_SKIP() << "device nodes cannot be opened in " << d << " (nodev mount)";
  }
  ::close(probe);
  write_output_file(dev, "into the void");
  fs::create_symlink("null", d / "link");
  write_output_file(d / "link", "again");
  EXPECT_TRUE(fs::is_character_file(dev));
  EXPECT_TRUE(fs::is_symlink(d / "link"));
  EXPECT_EQ(names(d), (std::vector<std::string>{"link", "null"}));
  fs::remove_all(d);
}

TEST(OutputFile, NothingIsCommittedOnceAMappedInputChanged) {
  fs::path d = temp_dir("io_out_mapped_changed");
  put(d / "w.bin", std::string(4096, 'w'));
  auto map = MappedFile::open(d / "w.bin");
  ASSERT_TRUE(map);
  write_output_file(d / "before.json", "fine");
  std::ofstream(d / "w.bin", std::ios::app) << "more";  // another program writes to the weights
  const std::string msg = bad_input_of([&] { write_output_file(d / "after.json", "x"); });
  EXPECT_NE(msg.find("w.bin' changed while fusec was reading it"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(d / "after.json"));
  write_output_file(d / "cache.json", "x", {"the cache", true, true});  // a cache does not depend on weights
  map.reset();
  write_output_file(d / "after.json", "x");  // unmapped: nothing to be wrong about
  fs::remove_all(d);
}

// ---- input_file: bounded, sizes first, errors exit 2 ----

TEST(InputFile, DevicesFoldersAndMissingFilesAreRefused) {
  EXPECT_NE(bad_input_of([] { InputFile f("/dev/zero"); }).find("'/dev/zero' is a device, not a file"),
            std::string::npos);
  EXPECT_NE(bad_input_of([] { InputFile f("/"); }).find("is a directory"), std::string::npos);
  EXPECT_NE(bad_input_of([] { InputFile f("/no/such/file"); }).find("does not exist"), std::string::npos);
}

TEST(InputFile, AStreamIsReadWithABound) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  auto* old_pipe = std::signal(SIGPIPE, SIG_IGN);  // the writer below outlives its reader
  std::thread writer([fd = p[1]] {
    const std::string chunk(1 << 16, 'z');
    for (int i = 0; i < 32; ++i)
      if (::write(fd, chunk.data(), chunk.size()) < 0) break;  // the reader gave up
    ::close(fd);
  });
  {
    InputFile in("/dev/fd/" + std::to_string(p[0]));
    EXPECT_FALSE(in.sized());
    const std::string msg = bad_input_of([&] { in.read_all(100000, "the test's limit"); });
    EXPECT_NE(msg.find("is not a regular file and gives more than the test's limit"), std::string::npos) << msg;
  }
  ::close(p[0]);
  writer.join();
  std::signal(SIGPIPE, old_pipe);
  // Under the bound, all of it.
  ASSERT_EQ(::pipe(p), 0);
  EXPECT_EQ(::write(p[1], "abc", 3), 3);
  ::close(p[1]);
  EXPECT_EQ(read_input_file("/dev/fd/" + std::to_string(p[0]), 100, "the test's limit"), "abc");
  ::close(p[0]);
}

TEST(InputFile, WholeFileReadsHonourTheMemoryLimit) {
  fs::path d = temp_dir("io_in_memory");
  put(d / "big.pb", std::string(1 << 20, 'b'));
  {
    MemoryLimit limit(64 << 10);
    const std::string msg = bad_input_of([&] { read_input_file(d / "big.pb", kNoFileLimit, ""); });
    EXPECT_NE(msg.find("1.00 MiB, more than the 64.00 KiB host memory limit"), std::string::npos) << msg;
  }
  EXPECT_EQ(read_input_file(d / "big.pb", kNoFileLimit, "").size(), size_t{1} << 20);
  fs::remove_all(d);
}

TEST(InputFile, ReadErrorsAndShortFilesAreBadInput) {
  // /proc/self/mem reads fail with EIO at address 0.
  const std::string eio = bad_input_of([] { read_input_file("/proc/self/mem", 4096, "a page"); });
  EXPECT_NE(eio.find("cannot read '/proc/self/mem'"), std::string::npos) << eio;
  fs::path d = temp_dir("io_in_short");
  put(d / "w.bin", "0123456789");
  InputFile in(d / "w.bin");
  char buf[16];
  in.read_at(buf, 4, 6);
  EXPECT_EQ(std::string(buf, 4), "6789");
  EXPECT_NE(bad_input_of([&] { in.read_at(buf, 8, 6); }).find("ends at byte 10"), std::string::npos);
  fs::remove_all(d);
}

TEST(InputFile, NpyDeclaredSizeIsCheckedBeforeAnythingIsAllocated) {
  fs::path d = temp_dir("io_in_npy");
  put(d / "big.npy", npy_bytes("(2, 500000000)", 512));
  {
    // With 1 MiB of memory, allocating first would fail with the memory error instead.
    MemoryLimit limit(1 << 20);
    const std::string msg = bad_input_of([&] { read_npy(d / "big.npy"); });
    EXPECT_NE(msg.find("holds 512 data bytes, shape 2x500000000 needs 4000000000"), std::string::npos) << msg;
  }
  std::string no_value = npy_bytes("(2,)", 8);
  no_value.replace(no_value.find("'shape': (2,), }"), 16, "'shape':        ");
  put(d / "no_value.npy", no_value);
  EXPECT_NE(bad_input_of([&] { read_npy(d / "no_value.npy"); }).find("no value for 'shape'"), std::string::npos);
  put(d / "ok.npy", npy_bytes("(2, 3)", 24));
  EXPECT_EQ(read_npy(d / "ok.npy").dims(), (std::vector<int64_t>{2, 3}));
  fs::remove_all(d);
}

TEST(InputFile, NpyFromAStreamIsCheckedAsItIsRead) {
  for (size_t extra : {0, 4}) {
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    const std::string bytes = npy_bytes("(2, 3)", 24 + extra);
    ASSERT_EQ(::write(p[1], bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    ::close(p[1]);
    const std::string path = "/dev/fd/" + std::to_string(p[0]);
    if (extra == 0)
      EXPECT_EQ(read_npy(path).numel(), 6);
    else
      EXPECT_NE(bad_input_of([&] { read_npy(path); }).find("has more bytes after"), std::string::npos);
    ::close(p[0]);
  }
}

TEST(InputFile, TensorProtoRawSizeIsCheckedBeforeAnythingIsAllocated) {
  fs::path d = temp_dir("io_in_pb");
  onnx::TensorProto p;
  p.set_data_type(onnx::TensorProto::FLOAT);
  p.add_dims(2);
  p.add_dims(500000000);
  p.set_raw_data(std::string(8, '\0'));
  put(d / "big.pb", p.SerializeAsString());
  MemoryLimit limit(1 << 20);
  const std::string msg = bad_input_of([&] { read_tensor_pb(d / "big.pb"); });
  EXPECT_NE(msg.find("raw data has 8 bytes"), std::string::npos) << msg;
  fs::remove_all(d);
}

// ---- signal_cleanup: temporaries go on a signal, a truncated map is one error ----

TEST(SignalCleanup, TemporariesAreRemovedAndTheSignalRaisedAgain) {
  fs::path d = temp_dir("io_sig_temps");
  put(d / "out.onnx", "previous");
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction now {};
    if (::sigaction(sig, nullptr, &now) == 0 && now.sa_handler == SIG_IGN) {
      // Inherited as ignored (a background job ignores SIGINT): fusec leaves it so, by design.
      std::printf("signal %d is ignored in this process; not tested\n", sig);
      continue;
    }
    EXPECT_EXIT(
        {
          OutputFile f(d / "out.onnx");
          f.write("half of a large model");
          fs::create_directories(d / "reports" / "nested");
          put(d / "reports" / "nested" / "r.json", "{}");
          put(d / "reports" / "a.json", "{}");
          TempPathGuard folder((d / "reports").string(), TempPathGuard::Kind::Folder);
          std::raise(sig);
          std::_Exit(0);  // not reached: the signal's default action ends the process
        },
        ::testing::KilledBySignal(sig), "");
    EXPECT_EQ(names(d), std::vector<std::string>{"out.onnx"}) << "signal " << sig;
    EXPECT_EQ(read_all(d / "out.onnx"), "previous");
  }
  fs::remove_all(d);
}

TEST(SignalCleanup, TheStepRunningIsStoppedFirst) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  EXPECT_EXIT(
      {
        const pid_t step = ::fork();
        if (step == 0) {
          ::pause();
          std::_Exit(0);
        }
        if (::write(p[1], &step, sizeof step) != sizeof step) std::_Exit(9);
        set_signal_child(step);
        install_signal_cleanup();
        std::raise(SIGTERM);
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGTERM), "");
  pid_t step = 0;
  ASSERT_EQ(::read(p[0], &step, sizeof step), static_cast<ssize_t>(sizeof step));
  ::close(p[0]);
  ::close(p[1]);
  const bool outlived = ::kill(step, 0) == 0;
  if (outlived) ::kill(step, SIGKILL);
  EXPECT_FALSE(outlived) << "the step outlived its parent";
}

TEST(SignalCleanup, AMapTruncatedUnderFusecIsOneErrorNotASignal) {
  fs::path d = temp_dir("io_sig_bus");
  put(d / "w.bin", std::string(1 << 20, 'w'));
  EXPECT_EXIT(
      {
        OutputFile pending(d / "out.onnx");
        auto map = MappedFile::open(d / "w.bin");
        fs::resize_file(d / "w.bin", 0);  // another program truncates the weights
        volatile char c = map->data()[map->size() - 1];
        (void)c;
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(2), "^fusec: error: '.*w\\.bin' was truncated by another program");
  EXPECT_EQ(names(d), std::vector<std::string>{"w.bin"}) << "the pending output's temporary was left";
  // A SIGBUS that is not in one of fusec's maps keeps its default action.
  EXPECT_EXIT(
      {
        install_signal_cleanup();
        std::raise(SIGBUS);
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGBUS), "");
  fs::remove_all(d);
}
