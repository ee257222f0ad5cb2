"""SSH against real sshd hosts: known_hosts rejects unknown and changed keys, clear errors per host, pooling."""

import subprocess

import paramiko
import pytest

from grpo_ui.remote.ssh import ChangedHostKey, Pool, SshError, UnknownHostKey, resolve, trust_host_key


def test_connects_through_ssh_config_and_runs(ssh_env):
    (h,) = ssh_env.add(1)
    target = resolve(h.name)
    assert (target.hostname, target.user, target.port) == (h.addr, "root", 22)
    pool = Pool()
    conn = pool.get(h.name)
    res = conn.run("ip -4 -o addr show | grep -c " + h.addr)
    assert res.rc == 0 and res.out.strip() == "1"  # the command ran inside the host's namespace
    assert pool.get(h.name) is conn
    pool.close()


def test_unknown_host_key_is_refused_with_its_fingerprint_until_trusted(ssh_env):
    (h,) = ssh_env.add(1, trusted=False)
    with pytest.raises(UnknownHostKey) as e:
        Pool().get(h.name)
    expected = subprocess.run(["ssh-keygen", "-lf", str(h.dir / "host_key.pub")], capture_output=True,
                              text=True).stdout.split()[1]
    assert e.value.fingerprint == expected and h.name in str(e.value)
    trust_host_key(e.value.hostname, e.value.port, e.value.key, ssh_env.known_hosts)
    assert Pool().get(h.name).run("true").rc == 0


def test_changed_host_key_is_a_hard_error(ssh_env):
    (h,) = ssh_env.add(1, trusted=False)
    other = paramiko.Ed25519Key.from_private_key_file(str(ssh_env.root / "id_ed25519"))
    with open(ssh_env.known_hosts, "a") as f:
        f.write(f"{h.addr} ssh-ed25519 {other.get_base64()}\n")
    with pytest.raises(ChangedHostKey, match="host key changed"):
        Pool().get(h.name)


def test_wrong_user_and_unreachable_host_name_the_host(ssh_env):
    (h,) = ssh_env.add(1)
    with pytest.raises(SshError, match=f"{h.name}: authentication failed for user 'nobody'"):
        Pool().get(h.name, user="nobody")
    with pytest.raises(SshError, match="cannot connect"):
        Pool().get(f"10.{ssh_env.subnet}.0.250", user="root")
