"""SSH against real sshd hosts: known_hosts rejects unknown and changed keys, clear errors per host, ProxyJump chains,
pooling (one connection per host, also under concurrent requests)."""

import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

import paramiko
import pytest

from grpo_ui.backends.remote.ssh import ChangedHostKey, Pool, SshError, UnknownHostKey, resolve, trust_host_key
from tests.wait import wait_for


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
    assert ssh_env.known_hosts.stat().st_mode & 0o777 == 0o600  # key material: the owner's only


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


def test_proxy_jump_user_host_port_and_chains_reach_hosts_that_refuse_direct_logins(ssh_env):
    """j accepts root only from h0's address, t only from j's: direct logins fail, the jump chains succeed, and
    closing the target closes every hop."""
    (h0,) = ssh_env.add(1, sshd_extra="Port 2222\n")
    (j,) = ssh_env.add(1, sshd_extra=f"AllowUsers root@{h0.addr}\n")
    (t,) = ssh_env.add(1, sshd_extra=f"AllowUsers root@{j.addr}\n")
    ssh_env.trust(h0, 2222)
    with open(ssh_env.ssh_config, "a") as f:
        f.write(f"Host {h0.addr}\n  IdentityFile {ssh_env.client_key}\n\n"
                f"Host j-via\n  HostName {j.addr}\n  User root\n  IdentityFile {ssh_env.client_key}\n"
                f"  ProxyJump root@{h0.addr}:2222\n\n"
                f"Host t-via\n  HostName {t.addr}\n  User root\n  IdentityFile {ssh_env.client_key}\n"
                f"  ProxyJump ssh://root@{h0.addr}:2222,{j.name}\n\n")
    for direct in (j, t):
        with pytest.raises(SshError, match=f"{direct.name}: authentication failed"):
            Pool().get(direct.name)
    assert resolve("t-via").proxy_jump == f"ssh://root@{h0.addr}:2222,{j.name}"
    pool = Pool()
    via_j = pool.get("j-via")
    assert via_j.run("echo $SSH_CONNECTION").out.split()[0] == h0.addr  # j saw the login come from h0
    via_t = pool.get("t-via")
    assert via_t.run("echo $SSH_CONNECTION").out.split()[0] == j.addr
    # h0 carries both first hops; j is j-via's target and t-via's second hop
    assert (ssh_env.connections(h0, 2222), ssh_env.connections(j), ssh_env.connections(t)) == (2, 2, 1)
    pool.close()
    assert wait_for(lambda: ssh_env.connections(h0, 2222) + ssh_env.connections(j) + ssh_env.connections(t) == 0)


def test_proxy_jump_errors_name_the_host(ssh_env):
    (h,) = ssh_env.add(1)
    with open(ssh_env.ssh_config, "a") as f:
        f.write(f"Host bad-hop\n  HostName {h.addr}\n  ProxyJump root@{h.name}:notaport\n\n"
                f"Host dead-end\n  HostName 10.{ssh_env.subnet}.0.247\n  User root\n  ProxyJump {h.name}\n\n")
    with pytest.raises(SshError, match="bad-hop: cannot read ProxyJump hop"):
        Pool().get("bad-hop")
    with pytest.raises(SshError, match=f"dead-end: jump host {h.name} cannot reach 10.{ssh_env.subnet}.0.247:22"):
        Pool().get("dead-end")
    assert wait_for(lambda: ssh_env.connections(h) == 0)  # the hop of the failed attempt was closed too


def test_threads_asking_for_one_host_at_once_share_one_connection(ssh_env):
    (h,) = ssh_env.add(1)
    pool, barrier = Pool(), threading.Barrier(8)

    def get(_):
        barrier.wait()
        return pool.get(h.name)
    with ThreadPoolExecutor(8) as ex:
        conns = list(ex.map(get, range(8)))
    assert len({id(c) for c in conns}) == 1
    assert ssh_env.connections(h) == 1
    pool.close()
