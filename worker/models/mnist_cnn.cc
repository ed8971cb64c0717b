// mnist_cnn: the pytorch/examples MNIST network without dropout, exactly as
// in the PyTorch DDP baseline (shared/bench/ddp_baseline.py): conv 1->32 k3,
// ReLU, conv 32->64 k3, ReLU, maxpool 2, flatten (9216), fc 128, ReLU, fc.
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "absl/strings/str_cat.h"
#include "worker/models/builtin_models.h"

namespace herd {
namespace {

class MnistCnn : public LogitsModule {
 public:
  explicit MnistCnn(int64_t classes) {
    c1_ = register_module("c1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).stride(1)));
    c2_ = register_module("c2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).stride(1)));
    f1_ = register_module("f1", torch::nn::Linear(9216, 128));
    f2_ = register_module("f2", torch::nn::Linear(128, classes));
  }

  // Convolution weights in channels-last (NHWC) order: oneDNN then runs both
  // convolutions, their backward and the pooling in that layout, about 20%
  // less time per step on one CPU thread (bench/README.md). The ReLUs after
  // the convolutions work in place: the convolutions' backward does not need
  // their outputs.
  void ChooseLayouts() override {
    torch::NoGradGuard no_grad;
    for (torch::nn::Conv2d* conv : {&c1_, &c2_}) {
      (*conv)->weight.set_data((*conv)->weight.contiguous(at::MemoryFormat::ChannelsLast));
    }
  }

  torch::Tensor forward(const torch::Tensor& inputs) override {
    torch::Tensor x = Convolve(c1_, inputs).relu_();
    x = at::max_pool2d(Convolve(c2_, x).relu_(), {2, 2});
    x = f1_->forward(x.flatten(1)).relu_();
    return f2_->forward(x);
  }

 private:
  // LibTorch 1.13 cannot run an empty batch (a rank's share at the end of an
  // epoch may be empty) through channels-last weights: a view inside
  // _convolution fails. Such a batch takes the plain layout; its gradients
  // (zeros) still flow back to the weight.
  static torch::Tensor Convolve(torch::nn::Conv2d& conv, const torch::Tensor& x) {
    if (x.size(0) == 0) return at::conv2d(x, conv->weight.contiguous(), conv->bias);  // stride 1, no padding
    return conv->forward(x);
  }

  torch::nn::Conv2d c1_{nullptr};
  torch::nn::Conv2d c2_{nullptr};
  torch::nn::Linear f1_{nullptr};
  torch::nn::Linear f2_{nullptr};
};

}  // namespace

absl::StatusOr<std::shared_ptr<LogitsModule>> MakeMnistCnn(const v1::ModelSpec&, const ModelInputInfo& info) {
  if (info.sample_shape != std::vector<int64_t>{1, 28, 28}) {
    return absl::InvalidArgumentError(absl::StrCat("model.name mnist_cnn needs 1x28x28 images (sample shape {1, 28, 28}); "
                                                   "the dataset gives ",
                                                   ShapeString(info.sample_shape)));
  }
  return std::make_shared<MnistCnn>(info.num_classes);
}

}  // namespace herd
