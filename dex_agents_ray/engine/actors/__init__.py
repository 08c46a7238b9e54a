"""The engine's Ray actors: hosts, the scheduler, executors and their pool.

A host holds runs (``run/``) and their store; the scheduler wakes passivated
runs whose timers come due; executors run remote Steps, which a host's pool
hands out. A host and the scheduler create each other on demand, so this
module gives ``_handles`` both classes and neither module imports the other.
Any import of this package's modules runs this first, in every process.
"""

from dex_agents_ray.engine.actors._handles import register_actor_classes
from dex_agents_ray.engine.actors._host import FlowHost
from dex_agents_ray.engine.actors._scheduler import FlowScheduler

register_actor_classes(host=FlowHost, scheduler=FlowScheduler)
