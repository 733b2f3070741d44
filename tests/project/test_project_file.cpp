// fusec.toml: defaults inherited by each model, per-model overrides, thresholds, the {device}
// folder, and the errors a mistyped file gets.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "ir/error.h"
#include "project/project_file.h"

namespace fusec::project {
namespace {

namespace fs = std::filesystem;

class ProjectFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fusec_project_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_ / "models");
    std::ofstream(dir_ / "models" / "a.onnx") << "x";
    std::ofstream(dir_ / "models" / "b.onnx") << "x";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& text) {
    std::string f = (dir_ / "fusec.toml").string();
    std::ofstream(f) << text;
    return f;
  }
  std::string error_of(const std::string& text) {
    try {
      load_project(write(text));
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput);
      return e.what();
    }
    ADD_FAILURE() << "no error for:\n" << text;
    return "";
  }
  fs::path dir_;
};

const char* kProject = R"(baselines = "baselines/{device}"
[defaults]
device = "cpu"
batch = 4
iterations = 50
skip = ["fuse_elementwise"]
[thresholds]
latency = "10%"
alpha = 0.05
[[model]]
path = "models/a.onnx"
[[model]]
path = "models/b.onnx"
name = "bee"
batch = 8
shapes = ["x:8x3"]
profile = false
[model.thresholds]
memory = "5%"
)";

TEST_F(ProjectFile, DefaultsAndOverrides) {
  Project p = load_project(write(kProject));
  ASSERT_EQ(p.models.size(), 2u);
  const ModelConfig& a = p.models[0];
  const ModelConfig& b = p.models[1];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(fs::path(a.path), (dir_ / "models" / "a.onnx").lexically_normal());
  EXPECT_EQ(a.batch, 4);
  EXPECT_EQ(a.iterations, 50);
  EXPECT_EQ(a.skip, std::vector<std::string>{"fuse_elementwise"});
  EXPECT_TRUE(a.profile);
  EXPECT_DOUBLE_EQ(a.thresholds.timing, 0.10);
  EXPECT_DOUBLE_EQ(a.thresholds.alpha, 0.05);
  EXPECT_DOUBLE_EQ(a.thresholds.memory, 0.01);  // the built-in default
  EXPECT_EQ(b.name, "bee");
  EXPECT_EQ(b.batch, 8);
  EXPECT_EQ(b.shapes, std::vector<std::string>{"x:8x3"});
  EXPECT_FALSE(b.profile);
  EXPECT_DOUBLE_EQ(b.thresholds.memory, 0.05);
  EXPECT_DOUBLE_EQ(b.thresholds.timing, 0.10);  // inherited
  EXPECT_EQ(baseline_dir(p, "cpu (2 threads)"), (dir_ / "baselines" / "cpu").string());
  EXPECT_EQ(baseline_dir(p, "cuda:0 NVIDIA H100 80GB HBM3 (sm_90)"),
            (dir_ / "baselines" / "nvidia-h100-80gb-hbm3").string());
}

TEST_F(ProjectFile, DeviceSlug) {
  EXPECT_EQ(device_slug("cpu (16 threads)"), "cpu");
  EXPECT_EQ(device_slug("cuda:1 NVIDIA H200 (sm_90)"), "nvidia-h200");
  EXPECT_EQ(device_slug("cuda:0 NVIDIA GeForce RTX 4090 (sm_89)"), "nvidia-geforce-rtx-4090");
}

TEST_F(ProjectFile, ErrorsNameFileAndLine) {
  std::string f = (dir_ / "fusec.toml").string();
  std::string e = error_of(std::string(kProject).replace(std::string(kProject).find("iterations"), 10, "iteratons"));
  EXPECT_NE(e.find(f + ":5: unknown key 'iteratons' in [defaults]"), std::string::npos) << e;
  e = error_of("baselines = \"b\"\n[[model]]\npath = \"models/zzz.onnx\"\n");
  EXPECT_NE(e.find(f + ":3: model 'models/zzz.onnx' does not exist"), std::string::npos) << e;
  e = error_of("baselines = \"b\"\n[[model]]\nname = \"a\"\n");
  EXPECT_NE(e.find("without a path"), std::string::npos) << e;
  e = error_of("baselines = \"b\"\n");
  EXPECT_NE(e.find("no models"), std::string::npos) << e;
  e = error_of("baselines = \"b\"\n[[model]]\npath = \"models/a.onnx\"\nbatch = \"4\"\n");
  EXPECT_NE(e.find(f + ":4: batch must be an integer"), std::string::npos) << e;
  e = error_of("baselines = \"b\"\n[[model]]\npath = \"models/a.onnx\"\nbatch = 0\n");
  EXPECT_NE(e.find(f + ":4: batch must be an integer of at least 1 (got 0)"), std::string::npos) << e;
  // Numbers follow their flag's rule (project/numbers.h): finite, in range, the same words.
  const std::string model = "baselines = \"b\"\n[[model]]\npath = \"models/a.onnx\"\n";
  e = error_of(model + "rtol = nan\n");
  EXPECT_NE(e.find(f + ":4: rtol must be a number greater than 0 (got nan)"), std::string::npos) << e;
  e = error_of(model + "atol = inf\n");
  EXPECT_NE(e.find(f + ":4: atol must be a number greater than 0 (got inf)"), std::string::npos) << e;
  e = error_of(model + "rtol = -1e-4\n");
  EXPECT_NE(e.find("rtol must be a number greater than 0 (got -1e-04)"), std::string::npos) << e;
  e = error_of(model + "iterations = 2000000000\n");
  EXPECT_NE(e.find("iterations must be an integer from 1 to 1073741824"), std::string::npos) << e;
  e = error_of(model + "warmup = 1.5\n");
  EXPECT_NE(e.find("warmup must be an integer from 0 to 1073741824"), std::string::npos) << e;
  e = error_of("baselines = \"b\"\n[thresholds]\nalpha = nan\n[[model]]\npath = \"models/a.onnx\"\n");
  EXPECT_NE(e.find(f + ":3: alpha must be a number greater than 0 and below 1 (got nan)"), std::string::npos) << e;
  EXPECT_EQ(*load_project(write(model + "rtol = 4e-7\natol = 2.5e-6\n")).models[0].rtol, 4e-7);
  e = error_of("baselines = \"b\"\n[[model]]\npath = \"models/a.onnx\"\npasses = [\"x\"]\nskip = [\"y\"]\n");
  EXPECT_NE(e.find("passes or skip, not both"), std::string::npos) << e;
  e = error_of("baselines = \"b\"\n[thresholds]\nlatency = \"5\"\n[[model]]\npath = \"models/a.onnx\"\n");
  EXPECT_NE(e.find("write a percentage"), std::string::npos) << e;
  e = error_of("baselines = \"b\"\n[[model]]\npath = \"models/a.onnx\"\nname = \"../x\"\n");
  EXPECT_NE(e.find("must be letters, digits"), std::string::npos) << e;
  e = error_of("baselines = [\n");
  EXPECT_NE(e.find("not valid TOML"), std::string::npos) << e;
  EXPECT_THROW(load_project((dir_ / "none.toml").string()), Error);
}

}  // namespace
}  // namespace fusec::project
