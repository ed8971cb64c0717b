#include "worker/comm/pipelined_all_reduce.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "worker/comm/tcp_socket.h"
#include "worker/comm/peer_fault.h"

namespace herd {

std::vector<StreamSegment> PipelineOrder(size_t pieces, size_t lookahead) {
  std::vector<StreamSegment> order;
  lookahead = std::max<size_t>(1, lookahead);
  const size_t lead = std::min(lookahead, pieces);
  for (size_t k = 0; k < lead; ++k) order.push_back({SegmentKind::kReduceScatter, k});
  for (size_t k = 0; k < pieces; ++k) {
    if (k + lookahead < pieces) order.push_back({SegmentKind::kReduceScatter, k + lookahead});
    order.push_back({SegmentKind::kAllGather, k});
  }
  return order;
}

namespace {

// Where one segment's bytes come from or go to on one stream.
struct Span {
  char* at = nullptr;
  size_t bytes = 0;
};

// One peer's stream: the segments in PipelineOrder and how far each
// direction has got.
struct Stream {
  int rank = 0;
  int fd = -1;
  size_t send_segment = 0, sent = 0;        // bytes of the current send segment
  size_t receive_segment = 0, received = 0;  // bytes of the current receive segment
};

class Pipeline {
 public:
  Pipeline(char* data, size_t count, const PipelinedAllReduceArgs& args, std::vector<std::vector<char>>& scratch)
      : data_(data), args_(args), order_() {
    const size_t el = args.element_bytes;
    const size_t pieces = (count + args.piece_elements - 1) / args.piece_elements;
    order_ = PipelineOrder(pieces, args.lookahead);
    size_t mine_total = 0;
    for (size_t k = 0; k < pieces; ++k) {
      const size_t begin = k * args.piece_elements;
      const size_t n = std::min(args.piece_elements, count - begin);
      RangeLayout layout = NearEqualRanges(n, args.size);
      for (auto& ranges : layout) {
        for (auto& range : ranges) {
          range.begin += begin;
          range.end += begin;
        }
      }
      ranges_.push_back(std::move(layout));
      scratch_offset_.push_back(mine_total);
      mine_total += Mine(k).size();
    }
    scratch_.assign(args.size, nullptr);
    for (int r = 0; r < args.size; ++r) {
      if (r == args.rank) continue;
      std::vector<char>& buffer = scratch[r];
      if (buffer.size() < mine_total * el) buffer.resize(mine_total * el);
      scratch_[r] = buffer.data();
      streams_.push_back(Stream{r, args.peer_fds[r]});
    }
    summed_.assign(pieces, 0);
    arrived_.assign(pieces, std::vector<size_t>(args.size, 0));
    for (size_t k = 0; k < pieces; ++k) {
      if (Mine(k).size() == 0) ++pieces_summed_;
    }
    pieces_ = pieces;
  }

  absl::Status Run(WorkTimes* times) {
    std::vector<pollfd> polled;
    std::vector<size_t> index;
    MarkFirstHopIfDone(times);
    while (true) {
      polled.clear();
      index.clear();
      for (size_t i = 0; i < streams_.size(); ++i) {
        Stream& s = streams_[i];
        SkipEmpty(s);
        short events = 0;
        if (s.send_segment < order_.size() && Ready(order_[s.send_segment])) events |= POLLOUT;
        if (s.receive_segment < order_.size()) events |= POLLIN;
        if (events == 0) continue;
        polled.push_back({s.fd, events, 0});
        index.push_back(i);
      }
      if (polled.empty()) return absl::OkStatus();
      const int wait = PollMillisUntil(args_.deadline);
      const int ready = wait == 0 ? 0 : poll(polled.data(), polled.size(), wait);
      if (ready < 0 && errno != EINTR) return absl::InternalError(absl::StrCat("poll: ", std::strerror(errno)));
      if (ready == 0) return Late(Laggard(index));
      for (size_t k = 0; k < polled.size(); ++k) {
        if (polled[k].revents == 0) continue;
        Stream& s = streams_[index[k]];
        if (s.receive_segment < order_.size() && (polled[k].revents & (POLLIN | POLLHUP | POLLERR))) {
          if (absl::Status status = Receive(s); !status.ok()) return status;
        }
        if (s.send_segment < order_.size() && (polled[k].revents & (POLLOUT | POLLHUP | POLLERR))) {
          if (absl::Status status = Send(s); !status.ok()) return status;
        }
      }
      MarkFirstHopIfDone(times);
    }
  }

 private:
  const ElementRange& Mine(size_t piece) const { return ranges_[piece][args_.rank][0]; }
  const ElementRange& Theirs(size_t piece, int rank) const { return ranges_[piece][rank][0]; }

  bool Ready(const StreamSegment& segment) const {
    return segment.kind == SegmentKind::kReduceScatter || summed_[segment.piece] == Mine(segment.piece).size();
  }

  // What stream `s` sends / receives in `segment`.
  Span SendSpan(const Stream& s, const StreamSegment& segment) const {
    const ElementRange& range = segment.kind == SegmentKind::kReduceScatter ? Theirs(segment.piece, s.rank)
                                                                            : Mine(segment.piece);
    return {data_ + range.begin * args_.element_bytes, range.size() * args_.element_bytes};
  }
  Span ReceiveSpan(const Stream& s, const StreamSegment& segment) const {
    if (segment.kind == SegmentKind::kReduceScatter) {
      return {scratch_[s.rank] + scratch_offset_[segment.piece] * args_.element_bytes,
              Mine(segment.piece).size() * args_.element_bytes};
    }
    const ElementRange& range = Theirs(segment.piece, s.rank);
    return {data_ + range.begin * args_.element_bytes, range.size() * args_.element_bytes};
  }

  // Steps over segments of no bytes (ranges empty when a piece has fewer
  // elements than ranks): both ends skip the same ones.
  void SkipEmpty(Stream& s) const {
    while (s.send_segment < order_.size() && SendSpan(s, order_[s.send_segment]).bytes == 0 &&
           Ready(order_[s.send_segment])) {
      ++s.send_segment;
    }
    while (s.receive_segment < order_.size() && ReceiveSpan(s, order_[s.receive_segment]).bytes == 0) {
      ++s.receive_segment;
    }
  }

  absl::Status Receive(Stream& s) {
    while (s.receive_segment < order_.size()) {
      const StreamSegment segment = order_[s.receive_segment];
      const Span span = ReceiveSpan(s, segment);
      if (s.received == span.bytes) {  // includes empty segments
        s.received = 0;
        ++s.receive_segment;
        continue;
      }
      const ssize_t n = recv(s.fd, span.at + s.received, span.bytes - s.received, 0);
      if (n == 0) return PeerClosedError(s.rank);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return absl::OkStatus();
        return PeerSocketError(s.rank, errno,
                               absl::StrCat("receiving from rank ", s.rank, ": ", std::strerror(errno)));
      }
      s.received += static_cast<size_t>(n);
      if (segment.kind == SegmentKind::kReduceScatter) {
        arrived_[segment.piece][s.rank] = s.received;
        SumArrived(segment.piece);
      }
      if (s.received == span.bytes) {  // move on now: no more bytes may come for it
        s.received = 0;
        ++s.receive_segment;
      }
    }
    return absl::OkStatus();
  }

  absl::Status Send(Stream& s) {
    while (s.send_segment < order_.size() && Ready(order_[s.send_segment])) {
      const Span span = SendSpan(s, order_[s.send_segment]);
      if (s.sent == span.bytes) {
        s.sent = 0;
        ++s.send_segment;
        continue;
      }
      const ssize_t n = send(s.fd, span.at + s.sent, span.bytes - s.sent, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return absl::OkStatus();
        return PeerSocketError(s.rank, errno,
                               absl::StrCat("sending to rank ", s.rank, ": ", std::strerror(errno)));
      }
      s.sent += static_cast<size_t>(n);
      if (s.sent == span.bytes) {
        s.sent = 0;
        ++s.send_segment;
      }
    }
    return absl::OkStatus();
  }

  // Sums, in rank order, the elements of this rank's range of `piece` that
  // every peer's copy has reached. Rank 0's contribution is the
  // accumulator: this rank's own range on rank 0, rank 0's copy elsewhere
  // (copied back once the piece is whole).
  void SumArrived(size_t piece) {
    const ElementRange& mine = Mine(piece);
    const size_t el = args_.element_bytes;
    size_t in = mine.size() * el;
    for (const Stream& s : streams_) in = std::min(in, arrived_[piece][s.rank]);
    const size_t end = in / el;
    size_t& done = summed_[piece];
    if (end <= done) return;
    auto contribution = [&](int r) -> char* {
      return r == args_.rank ? data_ + (mine.begin + done) * el : scratch_[r] + (scratch_offset_[piece] + done) * el;
    };
    char* acc = contribution(0);
    for (int r = 1; r < args_.size; ++r) args_.sum(acc, contribution(r), end - done);
    done = end;
    if (done == mine.size()) {
      if (args_.rank != 0) std::memcpy(data_ + mine.begin * el, scratch_[0] + scratch_offset_[piece] * el, mine.size() * el);
      ++pieces_summed_;
    }
  }

  void MarkFirstHopIfDone(WorkTimes* times) {
    if (times == nullptr || first_hop_marked_ || pieces_summed_ < pieces_) return;
    times->first_hop = std::chrono::steady_clock::now();
    first_hop_marked_ = true;
  }

  // Of the streams still owed bytes, the one that got least far: a live
  // peer may itself be held up (its all-gather waits for the late rank's
  // data), but it is never behind the rank that holds it up.
  const Stream& Laggard(const std::vector<size_t>& waiting) const {
    const Stream* laggard = &streams_[waiting.front()];
    for (size_t i : waiting) {
      const Stream& s = streams_[i];
      if (s.receive_segment >= order_.size()) continue;  // only our sends are pending there
      if (laggard->receive_segment >= order_.size() || s.receive_segment < laggard->receive_segment ||
          (s.receive_segment == laggard->receive_segment && s.received < laggard->received)) {
        laggard = &s;
      }
    }
    return *laggard;
  }

  absl::Status Late(const Stream& s) const {
    return PeerLateError(s.rank, absl::StrCat("rank ", s.rank, " did not answer in time: sent ", s.send_segment,
                                              " of ", order_.size(), " segments, received ", s.receive_segment,
                                              " of ", order_.size()));
  }

  char* const data_;
  const PipelinedAllReduceArgs& args_;
  std::vector<StreamSegment> order_;
  std::vector<RangeLayout> ranges_;      // per piece, absolute element ranges
  std::vector<size_t> scratch_offset_;   // per piece, elements into each peer's scratch
  std::vector<char*> scratch_;           // per rank
  std::vector<Stream> streams_;
  std::vector<size_t> summed_;                // per piece, elements of my range summed
  std::vector<std::vector<size_t>> arrived_;  // per piece and rank, bytes of my range received
  size_t pieces_ = 0;
  size_t pieces_summed_ = 0;
  bool first_hop_marked_ = false;
};

}  // namespace

absl::Status PipelinedAllReduce(char* data, size_t count, const PipelinedAllReduceArgs& args,
                                std::vector<std::vector<char>>& scratch, WorkTimes* times) {
  if (args.piece_elements == 0) return absl::InvalidArgumentError("pipelined all-reduce: piece size 0");
  if (scratch.size() < static_cast<size_t>(args.size)) scratch.resize(args.size);
  if (count == 0 || args.size == 1) {
    if (times != nullptr) times->first_hop = std::chrono::steady_clock::now();
    return absl::OkStatus();
  }
  Pipeline pipeline(data, count, args, scratch);
  return pipeline.Run(times);
}

}  // namespace herd
