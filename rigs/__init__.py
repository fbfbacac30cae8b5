"""What a set-up is: robots, sensors, the hidden truth of a simulated rig, and the simulator."""

from rigs.errors import InputError
from rigs.spec import Rig, builtin_rigs, load_rig

__all__ = ["InputError", "Rig", "builtin_rigs", "load_rig"]
