"""tests/dist/elastic_hosts.py — hosts that die and come back, for the
elastic tests (test_elastic.py) and bench/dist/elastic_recovery.py, on a
started hosts.Cluster: kill(i) is Cluster.kill_host (every process of the
host killed, its links down), revive(i) brings it back (links up, a fresh
sshd as its first process with its own hostname, /etc/hosts, ~/.bashrc and
/dev/shm: Cluster.boot, as at the start) and waits until it answers ssh;
ensure_up() revives what a failed test left down.  cut(i) / mend(i): a
link cut — host i's links down, then up again, its processes alive
throughout."""
from hosts import IP, _sh


class Hosts:
    def __init__(self, cluster):
        self.c = cluster
        self.down = set()

    def kill(self, i):
        self.down.add(i)
        self.c.kill_host(i)

    def _links(self, i, state):
        for end in ("m", "d"):
            _sh([IP, "-n", self.c.sw, "link", "set", f"v{self.c.tag}{end}{i}s", state])

    def cut(self, i):
        self._links(i, "down")

    def mend(self, i):
        self._links(i, "up")

    def revive(self, i):
        c = self.c
        self._links(i, "up")
        c.boot(i, log_mode="a")
        c.wait_answers([i], 60)
        self.down.discard(i)

    def ensure_up(self):
        for i in sorted(self.down):
            self.revive(i)
