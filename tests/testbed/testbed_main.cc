// herd-testbed: the testbed library (testbed.h) as a command, for benchmark
// scripts and people. `up` prints the testbed as JSON; the testbed lives
// until `down`, or until its owner (by default the caller of `up`) exits.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "tests/testbed/testbed.h"

namespace {

using herd::testbed::Testbed;

int Fail(const absl::Status& status) {
  std::cerr << status.message() << "\n";  // the library's messages start "testbed"
  return 1;
}

// "2" or "h2", or with sites also "s1h0" (site 1's first host).
bool ParseHost(const Testbed& bed, std::string text, int* host) {
  for (const auto& h : bed.hosts()) {
    if (h.name == text) {
      *host = h.index;
      return true;
    }
  }
  if (!text.empty() && text[0] == 'h') text.erase(0, 1);
  return absl::SimpleAtoi(text, host) && *host >= 0 && *host < static_cast<int>(bed.hosts().size());
}

// "1" or "s1".
bool ParseSite(const Testbed& bed, std::string text, int* site) {
  if (!text.empty() && text[0] == 's') text.erase(0, 1);
  return absl::SimpleAtoi(text, site) && *site >= 0 && *site < static_cast<int>(bed.sites().size());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "herd-testbed: hosts as network namespaces on a bridge, addresses from 198.18.0.0/15 only.\n"
      "HOST is an index (0, 1, ...), h0, h1, ..., or with sites s0h0, s0h1, ...; SITE is 0, 1, ... or s0, s1, ...;\n"
      "NAME is what `up` printed (\"name\").",
      "herd-testbed");
  app.require_subcommand(1);

  herd::testbed::TestbedOptions up_options;
  up_options.owner_pid = getppid();
  bool no_watchdog = false;
  auto* up = app.add_subcommand("up", "Create a testbed and print it as JSON");
  auto* hosts_option = up->add_option("--hosts", up_options.hosts, "Number of hosts (1..100; default 2)");
  up->add_option("--owner-pid", up_options.owner_pid,
                 "Tear the testbed down when this process exits (default: the caller of herd-testbed)");
  up->add_flag("--no-watchdog", no_watchdog, "Leave teardown to `down` or `sweep`");
  up->add_option("--delay-ms", up_options.delay_ms,
                 "One-way delay added to every host's link, each direction (ms, 0..10000; a relay per host)")
      ->capture_default_str();
  up->add_option("--sites", up_options.sites,
                 "Group the hosts into this many sites (1..20), each behind its own bridge and linked to the "
                 "others through the root host's bridge (default: none, one bridge)")
      ->excludes(hosts_option);
  up->add_option("--hosts-per-site", up_options.hosts_per_site, "Hosts in each site (with --sites)")
      ->capture_default_str();
  up->add_option("--site-rate", up_options.site_rate,
                 "Every host's link inside its site, each direction (tc rate, e.g. 1gbit; default unshaped)");
  up->add_option("--site-delay-ms", up_options.site_delay_ms,
                 "One-way delay between two hosts of a site (ms, 0..10000; each host's link holds half)")
      ->capture_default_str();
  up->add_option("--wan-rate", up_options.wan_rate,
                 "Every site's link to the other sites, each direction (tc rate, e.g. 50mbit; default unshaped)");
  up->add_option("--wan-delay-ms", up_options.wan_delay_ms,
                 "One-way delay between two sites, on top of the site delay (ms, 0..10000; each site's link "
                 "holds half)")
      ->capture_default_str();

  std::string name;
  std::string host_text;
  auto add_target = [&](CLI::App* command) {
    command->add_option("NAME", name, "Testbed name")->required();
    command->add_option("HOST", host_text, "Host")->required();
  };
  auto* down = app.add_subcommand("down", "Tear a testbed down (processes inside its hosts are killed)");
  down->add_option("NAME", name, "Testbed name")->required();
  auto* show = app.add_subcommand("show", "Print a testbed as JSON");
  show->add_option("NAME", name, "Testbed name")->required();
  auto* list = app.add_subcommand("list", "Print every testbed as JSON, with whether it is stale");
  auto* sweep = app.add_subcommand("sweep", "Tear down testbeds whose owner is gone, and orphaned objects");

  herd::testbed::ShapeOptions shape_options;
  auto* shape = app.add_subcommand("shape", "Limit a host's link rate in each direction (tc tbf)");
  add_target(shape);
  shape->add_option("RATE", shape_options.rate, "tc rate, e.g. 100mbit")->required();
  shape->add_option("--burst", shape_options.burst, "tbf burst")->capture_default_str();
  shape->add_option("--latency", shape_options.latency, "tbf latency")->capture_default_str();
  auto* unshape = app.add_subcommand("unshape", "Remove a host's rate limit");
  add_target(unshape);
  double percent = 0;
  auto* loss = app.add_subcommand("loss", "Drop PERCENT of a host's packets in each direction (0: none)");
  add_target(loss);
  loss->add_option("PERCENT", percent, "0..100")->required();
  int delay_ms = 0;
  auto* delay = app.add_subcommand(
      "delay", "Hold a host's frames DELAY_MS in each direction (a relay on its link; 0 keeps the relay, undelayed)");
  add_target(delay);
  delay->add_option("DELAY_MS", delay_ms, "0..10000")->required();
  auto* relay_stats = app.add_subcommand("relay-stats", "Print the counters of a host's delaying relay as JSON");
  add_target(relay_stats);
  auto* dropped = app.add_subcommand("dropped", "Print how many packets a host's loss rules dropped");
  add_target(dropped);
  auto* cut = app.add_subcommand("cut", "Take a host's link down");
  add_target(cut);
  auto* restore = app.add_subcommand("restore", "Bring a host's link back (returns once it is up)");
  add_target(restore);
  std::string site_text;
  auto add_site_target = [&](CLI::App* command) {
    command->add_option("NAME", name, "Testbed name")->required();
    command->add_option("SITE", site_text, "Site")->required();
  };
  auto* cut_site = app.add_subcommand(
      "cut-site", "Take a site's link to the other sites down (its hosts still reach each other)");
  add_site_target(cut_site);
  auto* restore_site = app.add_subcommand("restore-site", "Bring a site's link back (returns once it is up)");
  add_site_target(restore_site);
  std::string other_site_text;
  auto add_site_pair = [&](CLI::App* command) {
    add_site_target(command);
    command->add_option("OTHER_SITE", other_site_text, "The other site")->required();
  };
  auto* cut_between = app.add_subcommand(
      "cut-between", "Drop traffic between two sites; each keeps its own hosts and the root host (the core)");
  add_site_pair(cut_between);
  auto* restore_between = app.add_subcommand("restore-between", "Let two sites' traffic through again");
  add_site_pair(restore_between);
  auto* site_relay_stats =
      app.add_subcommand("site-relay-stats", "Print the counters of a site link's delaying relay as JSON");
  add_site_target(site_relay_stats);
  std::vector<std::string> command;
  auto* exec = app.add_subcommand("exec", "Run a command inside a host: exec NAME HOST -- CMD [ARGS...]");
  add_target(exec);
  exec->add_option("CMD", command, "Command and arguments")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  if (*up) {
    up_options.watchdog = !no_watchdog;
    auto bed = Testbed::Create(up_options);
    if (!bed.ok()) return Fail(bed.status());
    std::cout << (*bed)->Json() << "\n";
    return 0;
  }
  if (*list) {
    auto all = herd::testbed::ListTestbeds();
    if (!all.ok()) return Fail(all.status());
    nlohmann::json out = nlohmann::json::array();
    for (const auto& record : *all) {
      auto json = nlohmann::json::parse(record.json);
      json["stale"] = record.stale;
      out.push_back(json);
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (*sweep) {
    auto removed = herd::testbed::SweepStale();
    if (!removed.ok()) return Fail(removed.status());
    for (const auto& what : *removed) std::cout << "removed " << what << "\n";
    return 0;
  }

  auto bed = Testbed::Open(name);
  if (!bed.ok()) return Fail(bed.status());
  if (*down) {
    absl::Status s = (*bed)->Down();
    return s.ok() ? 0 : Fail(s);
  }
  if (*show) {
    std::cout << (*bed)->Json() << "\n";
    return 0;
  }
  if (*cut_site || *restore_site || *site_relay_stats || *cut_between || *restore_between) {
    int site = -1;
    if (!ParseSite(**bed, site_text, &site)) {
      std::cerr << "herd-testbed: no site '" << site_text << "' in " << name << " (" << (*bed)->sites().size()
                << " sites)\n";
      return 2;
    }
    if (*cut_between || *restore_between) {
      int other = -1;
      if (!ParseSite(**bed, other_site_text, &other)) {
        std::cerr << "herd-testbed: no site '" << other_site_text << "' in " << name << " ("
                  << (*bed)->sites().size() << " sites)\n";
        return 2;
      }
      absl::Status status =
          *cut_between ? (*bed)->CutBetweenSites(site, other) : (*bed)->RestoreBetweenSites(site, other);
      return status.ok() ? 0 : Fail(status);
    }
    if (*site_relay_stats) {
      auto stats = (*bed)->SiteRelayStats(site);
      if (!stats.ok()) return Fail(stats.status());
      std::cout << *stats;
      return 0;
    }
    absl::Status status = *cut_site ? (*bed)->CutSite(site) : (*bed)->RestoreSite(site);
    return status.ok() ? 0 : Fail(status);
  }
  int host = -1;
  if (!ParseHost(**bed, host_text, &host)) {
    std::cerr << "herd-testbed: no host '" << host_text << "' in " << name << " (" << (*bed)->hosts().size()
              << " hosts)\n";
    return 2;
  }
  absl::Status status;
  if (*shape) status = (*bed)->Shape(host, shape_options);
  if (*unshape) status = (*bed)->Unshape(host);
  if (*loss) status = (*bed)->SetLoss(host, percent);
  if (*delay) status = (*bed)->SetDelay(host, delay_ms);
  if (*relay_stats) {
    auto stats = (*bed)->RelayStats(host);
    if (!stats.ok()) return Fail(stats.status());
    std::cout << *stats;
    return 0;
  }
  if (*cut) status = (*bed)->Cut(host);
  if (*restore) status = (*bed)->Restore(host);
  if (*dropped) {
    auto count = (*bed)->DroppedPackets(host);
    if (!count.ok()) return Fail(count.status());
    std::cout << *count << "\n";
    return 0;
  }
  if (*exec) {
    std::vector<std::string> full = (*bed)->ExecPrefix(host);
    full.insert(full.end(), command.begin(), command.end());
    std::vector<char*> args;
    for (auto& a : full) args.push_back(a.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    perror("herd-testbed: exec ip netns exec");
    return 127;
  }
  return status.ok() ? 0 : Fail(status);
}
