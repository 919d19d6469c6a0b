"""Builds rotary_torch's C++ half in place: python3 setup.py build_ext --inplace (in this folder).
Without it, `import rotary_torch` builds the same extension just in time (torch.utils.cpp_extension)."""
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

setup(
    name="rotary_torch_ext",
    ext_modules=[CppExtension("rotary_torch_ext", [os.path.join(HERE, "rotary_torch.cpp")],
                              include_dirs=[os.path.join(ROOT, "include"), "/usr/include/eigen3"],
                              extra_compile_args=["-O2", "-std=c++17"])],
    cmdclass={"build_ext": BuildExtension},
)
