"""The names that leave the library, spelled once for Python (Note [One
spelling of the classes and events], torch/csrc/autograd/backward_device_class.h,
spells them once for C++): the four device classes of a backward pass, in
BackwardDeviceClass's order, and the two once-per-process API-usage events,
in the order of their bits. The record's keys, the report's columns, the
Prometheus and OTLP labels and the ctypes table's decoding all take them from
here; test/test_record_vocabulary.py holds them to the C++ header and the
record's schema, and finds any other spelling in the package."""

CPU_ONLY = "cpu_only"
SINGLE_ACCELERATOR = "single_accelerator"
ACCELERATOR_CPU = "accelerator_cpu"
MULTI_ACCELERATOR = "multi_accelerator"
#: BackwardDeviceClass's values, in order.
CLASSES = (CPU_ONLY, SINGLE_ACCELERATOR, ACCELERATOR_CPU, MULTI_ACCELERATOR)

MULTIDEVICE_BACKWARD = "torch.autograd.multidevice_backward"
GPU_CPU_BACKWARD = "torch.autograd.gpu_cpu_backward"
#: BackwardDeviceEvent's bits (1, 2), in order.
EVENTS = (MULTIDEVICE_BACKWARD, GPU_CPU_BACKWARD)
#: Each event's bit.
EVENT_BITS = {name: 1 << i for i, name in enumerate(EVENTS)}

# The words a switch takes, in any case. settings.h spells them for C++
# (Note [The library's settings are read once, at load]); the .pth spells
# the off words once more, since it cannot import the package to read them.
ON_WORDS = ("1", "true", "yes", "on")
OFF_WORDS = ("0", "false", "no", "off")
