// Horovod 0.9-0.13.2's coordinator loop, timed (scripts/measure_horovod_coordinator.py builds and
// runs it with Open MPI over its TCP transport, as Horovod's docs ran it: -mca btl ^openib).
//
// What it reproduces (horovod/tensorflow/mpi_ops.cc of v0.11.2, BackgroundThreadLoop):
// every worker sends one message per ready tensor to rank 0 (MPI_Send of the serialized
// MPIRequest: rank, type, dtype, device, the tensor's name and shape) and then an empty DONE
// message; rank 0 takes them one at a time, MPI_Probe(MPI_ANY_SOURCE) + MPI_Get_count +
// MPI_Recv into a new buffer, copies it into a std::string, parses it and counts the tensor in
// its message table (IncrementTensorCount: a hash map keyed by the name, the request appended),
// until every worker said DONE; then it sends each response (the fused batch's names) to every
// worker with MPI_Send, and a DONE to every worker. Printed: rank 0's time per received request
// and per sent response message, each the median over the repeats.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

namespace {
constexpr int kTag = 0;

struct Request {  // what horovod's MPIRequest carries (mpi_message.h)
  int rank, type, dtype, device;
  std::string name;
  std::vector<long> shape;
};

std::string Serialize(const Request& r) {  // a flat encoding of the same fields
  std::string out(reinterpret_cast<const char*>(&r.rank), 4 * sizeof(int));
  int n = static_cast<int>(r.name.size()), d = static_cast<int>(r.shape.size());
  out.append(reinterpret_cast<const char*>(&n), sizeof n).append(r.name);
  out.append(reinterpret_cast<const char*>(&d), sizeof d);
  out.append(reinterpret_cast<const char*>(r.shape.data()), d * sizeof(long));
  return out;
}

Request Parse(const std::string& s) {
  Request r;
  std::memcpy(&r.rank, s.data(), 4 * sizeof(int));
  size_t at = 4 * sizeof(int);
  int n, d;
  std::memcpy(&n, s.data() + at, sizeof n);
  at += sizeof n;
  r.name.assign(s.data() + at, n);
  at += n;
  std::memcpy(&d, s.data() + at, sizeof d);
  at += sizeof d;
  r.shape.resize(d);
  std::memcpy(r.shape.data(), s.data() + at, d * sizeof(long));
  return r;
}

std::string TensorName(int i) {  // TensorFlow's gradient names are about this long
  return "HorovodAllreduce_gradients/v/tower_0/cg/resnet_v1/conv2d_" + std::to_string(i) +
         "/Conv2D_grad/Conv2DBackpropFilter_0";
}
}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int tensors = argc > 1 ? std::atoi(argv[1]) : 200;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 20;
  const int responses = argc > 3 ? std::atoi(argv[3]) : 8;
  std::vector<double> per_request_s, per_response_s;
  for (int rep = 0; rep < repeats; ++rep) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank != 0) {
      for (int i = 0; i < tensors; ++i) {
        Request r{rank, 0, 6, 0, TensorName(i), {3, 3, 256, 256}};
        std::string msg = Serialize(r);
        MPI_Send(msg.c_str(), static_cast<int>(msg.size()) + 1, MPI_BYTE, 0, kTag, MPI_COMM_WORLD);
      }
      MPI_Send(nullptr, 0, MPI_BYTE, 0, kTag, MPI_COMM_WORLD);
      for (int i = 0; i <= responses; ++i) {  // the responses, then DONE
        MPI_Status status;
        int length;
        MPI_Probe(0, kTag, MPI_COMM_WORLD, &status);
        MPI_Get_count(&status, MPI_BYTE, &length);
        std::vector<char> buffer(length);
        MPI_Recv(buffer.data(), length, MPI_BYTE, 0, kTag, MPI_COMM_WORLD, &status);
      }
      continue;
    }
    // Let every worker's requests arrive first (in Horovod they queue during the 5 ms sleep).
    double wait_until = MPI_Wtime() + 0.05;
    while (MPI_Wtime() < wait_until) {
    }
    std::unordered_map<std::string, std::vector<Request>> table;
    auto start = std::chrono::steady_clock::now();
    int done = 1, received = 0;
    while (done != size) {
      MPI_Status status;
      int length;
      MPI_Probe(MPI_ANY_SOURCE, kTag, MPI_COMM_WORLD, &status);
      MPI_Get_count(&status, MPI_BYTE, &length);
      if (length == 0) {
        MPI_Recv(nullptr, 0, MPI_BYTE, status.MPI_SOURCE, kTag, MPI_COMM_WORLD, &status);
        ++done;
        continue;
      }
      char* buffer = new char[length];
      MPI_Recv(buffer, length, MPI_BYTE, status.MPI_SOURCE, kTag, MPI_COMM_WORLD, &status);
      std::string data(buffer, static_cast<size_t>(length));
      delete[] buffer;
      Request r = Parse(data);
      auto& entry = table[r.name];
      entry.push_back(std::move(r));
      ++received;
    }
    auto mid = std::chrono::steady_clock::now();
    std::string names;
    for (int i = 0; i < tensors / responses; ++i) names += TensorName(i);
    for (int i = 0; i <= responses; ++i) {
      std::string msg = i < responses ? names : std::string("DONE");
      for (int r = 1; r < size; ++r) {
        MPI_Send(msg.c_str(), static_cast<int>(msg.size()) + 1, MPI_BYTE, r, kTag, MPI_COMM_WORLD);
      }
    }
    auto end = std::chrono::steady_clock::now();
    per_request_s.push_back(std::chrono::duration<double>(mid - start).count() / received);
    per_response_s.push_back(std::chrono::duration<double>(end - mid).count() /
                             ((responses + 1) * (size - 1)));
  }
  if (rank == 0) {
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::printf("ranks %d tensors %d repeats %d: per received request %.3f us, per sent response %.3f us\n",
                size, tensors, repeats, median(per_request_s) * 1e6, median(per_response_s) * 1e6);
  }
  MPI_Finalize();
  return 0;
}
