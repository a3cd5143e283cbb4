# lit configuration for ppc's golden IR tests: TorchScript graph text in,
# stage graphs out, checked with FileCheck.
import os
import lit.formats

config.name = "ppc-golden"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".ir"]
config.test_source_root = config.ppc_src
config.test_exec_root = os.path.join(os.path.dirname(__file__))
config.substitutions.append(("%ppc", os.path.join(config.ppc_bin, "ppc")))
config.environment["PATH"] = "/usr/lib/llvm-14/bin:" + config.environment.get("PATH", os.environ["PATH"])
