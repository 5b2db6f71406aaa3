"""`make chaos`: a Jepsen-style safety check of redlease under pauses, crashes and partitions.

Client processes contend for one lock while faults are injected for real (SIGSTOP, SIGKILL,
killed/restarted Redis nodes, a delaying TCP proxy). Every write goes to a fenced resource that
records each attempt; :mod:`chaos.checker` reads the histories and counts violations.
"""
