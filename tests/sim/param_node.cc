#include "tests/sim/param_node.h"

#include <utility>

namespace aggswitch::sim {

ParamNode::ParamNode(World& world, Host& host, uint16_t port, aggregator::PsOptions options,
                     std::vector<tools::CoverSpec> covers, std::vector<tools::SgdJob> sgd)
    : world_(world),
      host_(host),
      port_(port),
      options_(std::move(options)),
      covers_(std::move(covers)),
      sgd_jobs_(std::move(sgd)) {
  Restart();
}

ParamNode::~ParamNode() {
  if (engine_ != nullptr) host_.Unbind(port_);
}

void ParamNode::Crash() {
  if (engine_ == nullptr) return;
  host_.Unbind(port_);
  engine_.reset();
  sgd_.reset();
  ++life_;
}

void ParamNode::Restart() {
  if (engine_ != nullptr) return;
  aggregator::PsOptions options = options_;
  if (!sgd_jobs_.empty()) {
    // As agg-ps --sgd: the model answers every complete chunk of its jobs.
    sgd_ = std::make_unique<tools::SgdModel>();
    for (const tools::SgdJob& job : sgd_jobs_) (void)sgd_->AddJob(job);
    options.tan.on_complete = [model = sgd_.get()](const aggregator::AggFields& f, std::span<uint8_t> payload) {
      return model->Apply(f, payload);
    };
  }
  engine_ = std::make_unique<aggregator::PsEngine>(options);
  for (const tools::CoverSpec& c : covers_) engine_->SetCovers(c.job_id, c.switch_node, c.ids);
  host_.Bind(port_, [this](const uint8_t* data, size_t len, uint32_t ip, uint16_t p) {
    OnDatagram(data, len, ip, p);
  });
  const uint64_t life = ++life_;
  world_.At(world_.now() + kExpirePeriodNs, [this, life] { Expire(life); });
}

void ParamNode::OnDatagram(const uint8_t* data, size_t len, uint32_t src_ip, uint16_t src_port) {
  if (engine_ == nullptr) return;
  out_.clear();
  tools::HandleDatagram(data, static_cast<uint32_t>(len), aggregator::TanPeer{src_ip, src_port},
                        world_.clock().NowNs(), *engine_, counters_, &out_);
  SendOut();
}

void ParamNode::Expire(uint64_t life) {
  if (life != life_ || engine_ == nullptr) return;
  out_.clear();
  engine_->Expire(world_.clock().NowNs(), &out_);
  SendOut();
  world_.At(world_.now() + kExpirePeriodNs, [this, life] { Expire(life); });
}

void ParamNode::SendOut() {
  for (const aggregator::TanOutput& o : out_) {
    ++counters_.tx_datagrams;
    (void)host_.Send(port_, o.to.ip, o.to.port, o.datagram.data(), o.datagram.size());
  }
  out_.clear();
}

}  // namespace aggswitch::sim
