// Hosts as network namespaces on one machine, for tests and benchmarks.
//
// A testbed is N network namespaces ("hosts") with one veth link each to a
// bridge in the current namespace (the "root host"). Addresses come only from
// 198.18.0.0/15 (RFC 2544's benchmark range): each testbed takes a free /24
// of it, the bridge is .1 and host i is .(10+i). A host's link can be shaped
// (tc tbf, both directions), made lossy (nftables `numgen random`, both
// directions), delayed (a userspace relay, herd-testbed-relay, since the
// kernel here has no netem), cut and restored, and processes run inside a
// host with `ip netns exec`.
//
// With sites (TestbedOptions::sites), the hosts are grouped: each site's
// hosts link to the site's own bridge, shaped and delayed as the site asks,
// and each site's bridge links to the root host's bridge (the "core") over
// its own shaped and delayed link, its uplink. The /24 stays one subnet
// (every bridge is one Ethernet), so no routing is needed; traffic inside a
// site never crosses an uplink, traffic between sites crosses two.
//
// Every object is named PREFIX+INDEX+suffix ("htb137br", "htb137h0",
// "htb137v0"), and a state file per testbed (kStateDir/NAME.json) records its
// owner process. Teardown happens in the destructor, in a watchdog process
// when the owner dies (even by SIGKILL), and in SweepStale() for anything a
// dead owner left behind. Creating and sweeping need root (CAP_NET_ADMIN and
// CAP_SYS_ADMIN); errors say which command failed and why.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace herd::testbed {

// Every testbed's objects start with this.
inline constexpr char kNamePrefix[] = "htb";

// The testbeds' state files: one folder for the machine, so every run sees
// every testbed (parallel runs pick different /24s, and a sweep can tell a
// dead run's leftovers from a live testbed).
inline constexpr char kStateDir[] = "/run/herd-testbed";

struct Host {
  int index = 0;
  std::string netns;    // the host's network namespace, e.g. "htb137h0"
  std::string veth;     // its link's end on the bridge, in the root namespace
  std::string address;  // e.g. "198.18.137.10"; the interface inside is eth0
  // The namespace of the link's delaying relay, e.g. "htb137d0"; it exists
  // once the host has been given a delay (SetDelay).
  std::string relay_netns;
  // Its site, -1 in a testbed without sites.
  int site = -1;
  // "h3"; with sites, the site and the host's place in it: "s1h0".
  std::string name;
};

// A group of hosts behind their own bridge, linked to the other sites
// through the core bridge (the root host's).
struct Site {
  int index = 0;
  std::string name;       // "s0"
  std::string bridge;     // its hosts' links join it, e.g. "htb137s0"
  std::string uplink;     // its link's end on `bridge`, e.g. "htb137u0"
  std::string core_port;  // its link's end on the core bridge, e.g. "htb137w0"
  // The namespace of its link's delaying relay, e.g. "htb137x0"; it exists
  // when the testbed has a wan_delay_ms.
  std::string relay_netns;
  std::vector<int> hosts;  // indices of its hosts, in order
};

struct TestbedOptions {
  // 1..100; 0: 2 without sites, sites x hosts_per_site with them (any other
  // count with sites is an error).
  int hosts = 0;
  // The process whose death tears the testbed down; 0: this process. With
  // this process, a watchdog child notices its exit (a pipe closes); with
  // another process (the CLI's caller), the watchdog checks it every second.
  pid_t owner_pid = 0;
  // Without a watchdog only the destructor, Down() and SweepStale() remove it.
  bool watchdog = true;
  // One-way delay (ms) added to every host's link in each direction; 0: none
  // (SetDelay for one host, or later). Not with sites: site_delay_ms.
  int delay_ms = 0;

  // Sites: 0 puts every host on the root host's bridge; 1..20 groups them,
  // hosts_per_site each (host i is in site i / hosts_per_site), every site
  // behind its own bridge and linked to the core (the root host's bridge).
  int sites = 0;
  int hosts_per_site = 2;
  // Every host's link inside its site: tbf in each direction (tc syntax,
  // "1gbit"); "": unshaped.
  std::string site_rate;
  // One way between two hosts of the same site: each host's link holds half
  // in each direction (a relay per host, as SetDelay); 0: no relays.
  int site_delay_ms = 0;
  // Every site's uplink: tbf in each direction, so a site sends and
  // receives at most this to and from all other sites together; "": unshaped.
  std::string wan_rate;
  // One way between two sites, on top of site_delay_ms: each site's uplink
  // holds half in each direction (a relay per site). The root host, at the
  // core, is half of it from every site.
  int wan_delay_ms = 0;
};

struct ShapeOptions {
  std::string rate;  // tc syntax: "100mbit", "1gbit"
  std::string burst = "64kb";
  std::string latency = "100ms";
};

class Testbed {
 public:
  // Sweeps stale testbeds, picks a free /24 and creates the hosts; returns
  // once every link is up.
  static absl::StatusOr<std::unique_ptr<Testbed>> Create(TestbedOptions options = {});
  // A testbed another process created (the CLI's later commands). The object
  // does not own it: destroying the object leaves the testbed up.
  static absl::StatusOr<std::unique_ptr<Testbed>> Open(const std::string& name);
  ~Testbed();  // Down() if this object created the testbed
  Testbed(const Testbed&) = delete;
  Testbed& operator=(const Testbed&) = delete;

  // Kills the processes inside the hosts, deletes links, namespaces and
  // bridge, removes the state file, and checks that nothing is left.
  absl::Status Down();

  const std::string& name() const { return name_; }
  const std::string& bridge() const { return bridge_; }
  const std::string& subnet() const { return subnet_; }  // "198.18.137.0/24"
  // The bridge's address: the root namespace as a host.
  const std::string& root_address() const { return root_address_; }
  const std::vector<Host>& hosts() const { return hosts_; }
  const Host& host(int index) const { return hosts_.at(index); }
  // Empty without sites.
  const std::vector<Site>& sites() const { return sites_; }
  const Site& site(int index) const { return sites_.at(index); }
  // The index of the `nth` host of `site`.
  int HostIndex(int site, int nth) const { return sites_.at(site).hosts.at(nth); }
  // `ip netns exec NETNS`, absolute path first: prepend it to a command's
  // argv to run it inside the host.
  std::vector<std::string> ExecPrefix(int host) const;
  // Runs `fn` on a thread that has entered the host's network namespace:
  // sockets it opens belong to that host (and stay there when used later
  // from any thread).
  absl::Status RunInHost(int host, const std::function<void()>& fn) const;

  // Limits the host's link to `options.rate` in each direction (tbf).
  absl::Status Shape(int host, const ShapeOptions& options);
  absl::Status Unshape(int host);
  // Drops `percent` (0..100, 0.01 steps) of the packets in each direction of
  // the host's link; 0 removes the rules.
  absl::Status SetLoss(int host, double percent);
  // Packets the loss rules dropped so far (0 without rules).
  absl::StatusOr<uint64_t> DroppedPackets(int host) const;
  // Holds every frame on the host's link for `delay_ms` (0..10000) in each
  // direction, so host a to host b takes delay(a) + delay(b) one way, and a
  // round trip twice that; the root host adds none. The first call puts a
  // relay on the link (its namespace relay_netns: the link's bridge end moves
  // there as `tohost`, and a new veth pair `tobridge` / veth joins the
  // bridge); later calls restart the relay with the new delay (frames in
  // flight are lost), and 0 keeps the relay with no delay. Shaping, loss and
  // cuts keep working; the relay binary is herd-testbed-relay (found through
  // $HERD_TESTBED_RELAY, next to this executable, or in its runfiles).
  absl::Status SetDelay(int host, int delay_ms);
  // The relay's counters as JSON (relay.h: frames, bytes, drops per
  // direction), or NotFound without a relay.
  absl::StatusOr<std::string> RelayStats(int host) const;
  // Takes the host's link down (its bridge port; the host sees no carrier).
  absl::Status Cut(int host);
  // Brings it back; returns once both ends are up.
  absl::Status Restore(int host);
  // Takes a site's uplink down (both ends): its hosts still reach each
  // other, but neither the other sites nor the root host; the other sites
  // keep theirs. With two sites, the link between them is cut.
  absl::Status CutSite(int site);
  // Brings it back; returns once every end is up.
  absl::Status RestoreSite(int site);
  // Drops every frame between sites a and b (both directions) at the core
  // bridge, where their uplinks meet: each site keeps its own hosts and the
  // root host (the core, where the coordinator runs), and the other sites.
  // A WAN partition between two datacenters that both still see the control
  // plane. nftables, bridge family, in the root namespace: one table named
  // like the testbed, one chain per cut pair; idempotent.
  absl::Status CutBetweenSites(int a, int b);
  // Removes that cut (a no-op when there is none); TCP connections made
  // before it carry on.
  absl::Status RestoreBetweenSites(int a, int b);
  // The counters of the site uplink's relay as JSON, or NotFound without
  // one (no wan_delay_ms).
  absl::StatusOr<std::string> SiteRelayStats(int site) const;

  // The state file's content: {name, subnet, bridge, root_address,
  // owner_pid, hosts: [{index, name, site, netns, veth, relay_netns,
  // address}], sites: [{index, name, bridge, uplink, core_port, relay_netns,
  // hosts}], site_rate, site_delay_ms, wan_rate, wan_delay_ms}.
  std::string Json() const;

 private:
  Testbed() = default;
  absl::Status CreateObjects();
  absl::Status WaitForLinks(const std::vector<int>& hosts) const;
  absl::Status StartWatchdog();
  std::string TeardownScript() const;
  std::string state_file() const;
  absl::Status CheckHost(int host) const;
  bool Relayed(int host) const;
  std::string relay_stats_file(int host) const;
  std::string relay_log_file(int host) const;
  std::string site_relay_stats_file(int site) const;
  std::string site_relay_log_file(int site) const;
  absl::Status SetDelayUs(int host, int64_t delay_us);
  absl::Status CreateSite(const Site& site);
  absl::Status WaitForSiteLinks(int site) const;
  absl::Status CheckSite(int site) const;
  absl::Status CheckSitePair(int a, int b) const;
  std::string CutChain(int a, int b) const;
  bool SiteRelayed(int site) const;
  const std::string& BridgeOf(int host) const;

  std::string name_;
  std::string bridge_;
  std::string subnet_;
  std::string root_address_;
  std::string token_;  // per run: a watchdog only removes its own testbed
  pid_t owner_pid_ = 0;
  uint64_t owner_start_ = 0;  // the owner's start time, against pid reuse
  std::vector<Host> hosts_;
  std::vector<Site> sites_;
  std::string site_rate_;
  int site_delay_ms_ = 0;
  std::string wan_rate_;
  int wan_delay_ms_ = 0;
  bool owned_ = false;
  bool down_ = false;
  int watchdog_fd_ = -1;  // write end of the pipe an in-process watchdog reads
  pid_t watchdog_pid_ = -1;
};

struct TestbedRecord {
  std::string name;
  pid_t owner_pid = 0;
  bool stale = false;  // its owner is gone
  std::string json;    // the state file
};

// Every testbed on this machine.
absl::StatusOr<std::vector<TestbedRecord>> ListTestbeds();

// Tears down testbeds whose owner is gone, and namespaces and links named
// like a testbed's that no state file claims (a run killed mid-teardown).
// Returns what it removed.
absl::StatusOr<std::vector<std::string>> SweepStale();

}  // namespace herd::testbed
