"""The SSH launcher: real hosts from a hostfile, reached over SSH (asyncssh), each
interface shaped with the one host shaping plan, one torchrun agent per host.

  remote.py    commands and SFTP on the hosts, for synchronous code
  checks.py    every host checked before anything is changed
  messages.py  how the checks word what a host lacks, and its fix
  hostside.py  what runs on each host: facts, its own record, `tied`, teardown
  proctree.py  the process tree below `tied`, stopped by identity (on each host)
  relay.py     one remote command as a local process (what spawn returns)
  commands.py  the command lines run on a host: `tied`, torchrun, mirrored files
  state.py     the state file, and teardown on every recorded host
  launcher.py  SshLauncher, composing them on the core of bench/launch

The hostfile (pdsh / DeepSpeed lines, or YAML) is the core's bench/launch/hostfile.py,
which the multi-host export reads too. Imports the core of bench/launch, bench.net,
specfile, asyncssh and (checks.py, for the cells' plug-ins) aqsgd.compress.plugins; no
other launcher.
Nothing is imported here, so that what runs on a host (hostside, relay) loads only what
it needs; the launcher class is bench.launch.ssh.launcher.SshLauncher.
"""
