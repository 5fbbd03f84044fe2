#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>
#include "absl/strings/str_cat.h"
#include "farm/farm.h"
#include "farm/kv/kv.h"
#include <catch2/catch.hpp>
#include "tests/runtime_cluster.h"
using namespace farm;
double P50(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size()/2]; }
TEST_CASE("lat") {
  RuntimeOptions o; o.poll = "busy";
  auto rts = testing::StartRuntimes(2, o, testing::RuntimeClusterConfig(2, 4 << 20));
  std::vector<std::unique_ptr<kv::Store>> st;
  for (auto& rt : rts) { kv::Options ko; ko.hold_shard = rt->node_id() != 0; st.push_back(*kv::Store::Create(*rt, ko)); rt->Serve(); }
  auto w = *rts[0]->NewWorker();
  kv::Client c(*st[0], *w);
  std::vector<std::string> remote;
  for (int i = 0; remote.size() < 200; ++i) {
    std::string k = absl::StrCat("user", i);
    (void)c.Put(k, std::string(32, 'v'));
    remote.push_back(k);
  }
  auto regs = rts[0]->Regions(1);
  std::vector<char> buf(2048);
  {
    int retries = 0;
    for (int i = 0; i < 50; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      auto v = c.GetRpc(remote[i]);
      auto t1 = std::chrono::steady_clock::now();
      auto r = w->Call(1, 0xfe00, "");
      auto t2 = std::chrono::steady_clock::now();
      if (i < 5) std::printf("getrpc %.1f us ok=%d, describe call %.1f us\n", std::chrono::duration<double, std::micro>(t1 - t0).count(), v.ok(), std::chrono::duration<double, std::micro>(t2 - t1).count());
    }
    (void)retries;
  }
  for (int round = 0; round < 3; ++round) {
    std::vector<double> g, r, rpc;
    for (int i = 0; i < 20000; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      auto v = c.Get(remote[i % remote.size()]);
      auto t1 = std::chrono::steady_clock::now();
      (void)w->Read(GlobalAddress{regs[0].id, 4096}, buf.data(), 2048);
      auto t2 = std::chrono::steady_clock::now();
      auto v2 = c.GetRpc(remote[i % remote.size()]);
      auto t3 = std::chrono::steady_clock::now();
      g.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      r.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
      rpc.push_back(std::chrono::duration<double, std::micro>(t3 - t2).count());
    }
    std::printf("get p50 %.2f us (includes local ones), read2k p50 %.2f us, getrpc p50 %.2f\n", P50(g), P50(r), P50(rpc));
  }
  w.reset();
  rts.clear();
}
