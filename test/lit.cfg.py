# lit configuration for the trellis tests: MLIR files run through trellis-opt,
# .test files drive the `trellis` CLI.
import os
import shutil

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "TRELLIS"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.trellis_obj_root, "test")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "Inputs"]

config.substitutions.append(("%examples", os.path.join(config.trellis_src_root, "examples")))
config.substitutions.append(("%trellis_tools_dir", config.trellis_tools_dir))
# LD_PRELOAD=%failsyscall TRELLIS_FAIL=... makes C library calls fail.
config.substitutions.append(("%failsyscall", os.path.join(config.trellis_obj_root, "lib", "trellis-fail-syscall.so")))

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

tool_dirs = [config.trellis_tools_dir, config.llvm_tools_dir]
tools = ["trellis-opt", "trellis-run", "trellis", "trellis-capi-test",
         "trellis-calibrate", "trellis-plan-type-fuzz"]
llvm_config.add_tool_substitutions(tools, tool_dirs)

# mpirun.test starts ranks with Open MPI's mpirun (scripts/setup.sh
# installs Debian's openmpi-bin); lit reports it unsupported without one.
if shutil.which("mpirun"):
    config.available_features.add("mpirun")

# cuda-backend: the runtime was built with the CUDA backend (nvcc found);
# gpu: this machine has an NVIDIA GPU its driver can use.
import subprocess
_run = os.path.join(config.trellis_tools_dir, "trellis-run")
try:
    _help = subprocess.run([_run, "--help"], capture_output=True, text=True).stdout
    if "  cuda:" in _help:
        config.available_features.add("cuda-backend")
except OSError:
    pass
if shutil.which("nvidia-smi") and subprocess.run(
        ["nvidia-smi", "-L"], capture_output=True).returncode == 0:
    config.available_features.add("gpu")
