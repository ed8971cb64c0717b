// The herd release every binary reports with --version. Keep it equal to
// appVersion in deploy/helm/herd/Chart.yaml (the images' tag);
// //deploy/test:version_test checks both.
#pragma once

namespace herd {

inline constexpr char kVersion[] = "0.1.0";

}  // namespace herd
