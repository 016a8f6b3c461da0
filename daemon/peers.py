"""Who is at the other end of a loopback connection: the unix user that owns the client's
socket, asked of the kernel with one sock_diag netlink query (what `ss -e` shows as uid).

Every local client comes from 127.0.0.1 (or any 127.x address it binds), so counting
connections by address would put all of a node's users in one count, and one of them could
shut the others out; counted by user, each has a share of its own (daemon/connections.py).
"""

import ipaddress
import logging
import socket
import struct

log = logging.getLogger(__name__)

_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 0x1
_NLMSG_ERROR = 2
_NO_COOKIE = 0xFFFFFFFF
_ALL_STATES = 0xFFFFFFFF
# nlmsghdr; inet_diag_req_v2 (family, protocol, ext, pad, states) and its inet_diag_sockid
# (ports and addresses in network order, interface, cookie).
_HEADER = struct.Struct("=IHHII")
_REQUEST = struct.Struct("=BBBBI")
_SOCKID = struct.Struct("!HH16s16s")
_SOCKID_REST = struct.Struct("=III")
# inet_diag_msg: family, state, timer, retrans, the 48-byte sockid, expires, rqueue,
# wqueue, uid, inode.
_UID_AT = _HEADER.size + 4 + 48 + 12


class PeerUsers:
    """Looks up the owner of a loopback client's socket; one netlink socket, reused."""

    def __init__(self) -> None:
        self._netlink: socket.socket | None = None
        self._broken = False

    def uid(self, client: tuple[str, int], server: tuple[str, int]) -> int | None:
        """The uid owning the socket at `client` connected to our `server` address; None
        when the client is not on loopback, or the kernel does not say."""
        if self._broken or not _loopback(client[0]):
            return None
        try:
            return self._ask(client, server)
        except OSError as error:  # a kernel without sock_diag, or a sandbox that forbids it
            self._broken = True
            log.warning("cannot tell local clients apart by user (%s); counted by address", error)
            return None

    def _ask(self, client: tuple[str, int], server: tuple[str, int]) -> int | None:
        family = socket.AF_INET6 if ":" in client[0] else socket.AF_INET
        request = (
            _REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, _ALL_STATES)
            + _SOCKID.pack(client[1], server[1], _packed(client[0]), _packed(server[0]))
            + _SOCKID_REST.pack(0, _NO_COOKIE, _NO_COOKIE)
        )
        message = (
            _HEADER.pack(_HEADER.size + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0)
            + request
        )
        netlink = self._socket()
        netlink.send(message)
        answer = netlink.recv(65536)
        _, kind, _, _, _ = _HEADER.unpack_from(answer)
        if kind == _NLMSG_ERROR or len(answer) < _UID_AT + 4:
            return None  # gone already, or not found
        (uid,) = struct.unpack_from("=I", answer, _UID_AT)
        return int(uid)

    def _socket(self) -> socket.socket:
        if self._netlink is None:
            self._netlink = socket.socket(
                socket.AF_NETLINK,
                socket.SOCK_DGRAM | socket.SOCK_CLOEXEC,
                4,  # NETLINK_SOCK_DIAG
            )
            self._netlink.settimeout(1.0)
        return self._netlink

    def close(self) -> None:
        if self._netlink is not None:
            self._netlink.close()
            self._netlink = None


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _packed(address: str) -> bytes:
    """An address as inet_diag_sockid holds it: 16 bytes, an IPv4 one in the first 4."""
    return ipaddress.ip_address(address).packed.ljust(16, b"\0")
