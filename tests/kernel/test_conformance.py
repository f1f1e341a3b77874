"""NABLA_ASAN: also run under the ASan build by tools/run-tests.sh.
Jupyter's own kernel conformance suite (jupyter_kernel_test) against `nabla kernel`,
with every optional attribute set.  One PASS/FAIL line per test (and subtest failure)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kutil  # noqa: E402  (sets JUPYTER_PATH before jupyter_client is imported)

try:
    import jupyter_kernel_test as jkt
except ImportError as e:
    print(f"SKIP: conformance: jupyter_kernel_test is not installed ({e}); apt install python3-jupyter-kernel-test")
    sys.exit(0)

kutil.install("nabla")
jkt.TIMEOUT = 15 * kutil.SLOW


class NablaKernelTests(jkt.KernelTests):
    kernel_name = "nabla"
    language_name = "nabla"
    file_extension = ".nbl"

    code_hello_world = 'print("hello, world")'
    code_stderr = 'eprint("something went wrong")'
    completion_samples = [
        {"text": "pri", "matches": {"print"}},
        {"text": "zi", "matches": {"zip"}},
    ]
    complete_code_samples = ["1", 'print("hello, world")', "fn f(x) { x + 1 }", "x = [1, 2]\ny = 3"]
    incomplete_code_samples = ["fn f(x) {", "x = [1, 2,", "if true {\n  print(1)"]
    invalid_code_samples = ["}", "x = )", "1 +* 2"]
    code_page_something = "?print"
    code_generate_error = 'error("boom")'
    code_execute_result = [
        {"code": "1 + 2", "result": "3"},
        {"code": "6 * 7", "result": "42"},
        {"code": "x = 5\nx * 2", "result": "10"},
    ]
    code_display_data = [
        {"code": "display(42)", "mime": "text/plain"},
        {"code": "display(ones([2, 2]))", "mime": "text/html"},
    ]
    code_history_pattern = "6 * *"
    supported_history_operations = ("tail", "range", "search")
    code_inspect_sample = "print"
    code_clear_output = "clear_output()"


class Result(unittest.TextTestResult):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.lines = []

    def addSuccess(self, test):
        super().addSuccess(test)
        self.lines.append((test._testMethodName, True, ""))

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.lines.append((test._testMethodName, False, self._exc_info_to_string(err, test).strip().splitlines()[-1]))

    def addError(self, test, err):
        super().addError(test, err)
        self.lines.append((test._testMethodName, False, self._exc_info_to_string(err, test).strip().splitlines()[-1]))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.lines.append((test._testMethodName, None, reason or "not applicable"))

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            name = f"{test._testMethodName} {subtest._subDescription()}"
            if issubclass(err[0], unittest.SkipTest):
                self.lines.append((name, None, str(err[1]) or "not applicable"))
            else:
                self.lines.append((name, False, self._exc_info_to_string(err, test).strip().splitlines()[-1]))


if __name__ == "__main__":
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(NablaKernelTests)
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2, resultclass=Result)
    res = runner.run(suite)
    failed_methods = {n.split(" ")[0] for n, ok, _ in res.lines if ok is False}
    for name, ok, why in res.lines:
        # a method with a failed subtest also reports success at the end; show the failure only
        if ok is True and name in failed_methods:
            continue
        kutil.result("conformance " + name, ok, why)
    if not res.lines:
        kutil.result("conformance", False, "no tests ran")
    kutil.finish()
