"""Builds the C core, samprof._samprof.

Environment switches (all in one place):
  SAMPROF_WERROR=1    treat compiler warnings as errors (CI does).
  SAMPROF_SANITIZE=1  build with AddressSanitizer + UBSan, asserts on.
  SAMPROF_DEBUG=1     -O0 -g, asserts on.
"""

import glob
import os
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

sources = sorted(glob.glob("src/samprof/_c/*.c"))
compile_args = ["-std=gnu11", "-Wall", "-Wextra", "-fvisibility=hidden", "-fno-strict-aliasing"]
# Bind every symbol when the module loads, so the signal handler never runs
# the dynamic linker (docs/design.md §2).
link_args = ["-Wl,-z,now"]
macros = []

if os.environ.get("SAMPROF_WERROR") == "1":
    compile_args.append("-Werror")
if os.environ.get("SAMPROF_SANITIZE") == "1":
    flags = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
    compile_args += flags + ["-O1", "-g", "-UNDEBUG"]
    link_args += flags
    macros.append(("SAMPROF_SANITIZE", "1"))
elif os.environ.get("SAMPROF_DEBUG") == "1":
    compile_args += ["-O0", "-g", "-UNDEBUG"]
else:
    compile_args += ["-O2"]


class build_ext_always(build_ext):
    """Recompiles on every build.

    The switches above change the flags but not the sources, and setuptools
    skips an extension whose output in build/ is newer than its sources, so a
    build/ left by another flavour would be reused silently (an unsanitized
    module under SAMPROF_SANITIZE=1, or the reverse).
    """

    def finalize_options(self):
        super().finalize_options()
        self.force = True

    def build_extension(self, ext):
        """Compiles the sources one compiler process per CPU: the core is
        one extension of many files, which setuptools compiles one by one."""
        compile_serially = self.compiler.compile

        def compile_in_parallel(sources, *args, **kwargs):
            with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
                parts = pool.map(lambda one: compile_serially([one], *args, **kwargs), sources)
                return [obj for part in parts for obj in part]

        self.compiler.compile = compile_in_parallel
        try:
            super().build_extension(ext)
        finally:
            del self.compiler.compile


setup(
    cmdclass={"build_ext": build_ext_always},
    ext_modules=[
        Extension(
            "samprof._samprof",
            sources=sources,
            depends=sorted(glob.glob("src/samprof/_c/*.h")),
            # libm, part of the C library: log and exp for heap sampling.
            libraries=["m"],
            extra_compile_args=compile_args,
            extra_link_args=link_args,
            define_macros=macros,
        )
    ]
)
