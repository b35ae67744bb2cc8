// SPDX-License-Identifier: MIT
// mt_cxx.cc - a multi-threaded C++ program for real-programs.sh: its output
// depends only on its arguments, never on scheduling or addresses, so a run
// under the LD_PRELOAD drop-in must print exactly what a run without it does.
//
// Each thread builds std::map / std::unordered_map of std::string to
// std::vector, grows strings, a std::unique_ptr list, over-aligned objects
// (aligned operator new and new[], a std::vector of them), nothrow new and
// std::shared_ptr, and hands batches of strings to the next thread (freed
// there).  Prints one line per thread and a total.
//
//   mt_cxx [THREADS [ROUNDS]]     (default 4 40)
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

struct alignas(64) Cell {
	std::uint64_t v[8];
};

struct alignas(4096) Page {
	unsigned char b[4096];
};

struct Node {
	std::string name;
	std::unique_ptr<Node> next;
};

std::uint64_t fnv(std::uint64_t h, const void *p, std::size_t n)
{
	const unsigned char *c = static_cast<const unsigned char *>(p);
	for (std::size_t i = 0; i < n; i++) {
		h ^= c[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

std::uint64_t fnv(std::uint64_t h, std::uint64_t v) { return fnv(h, &v, sizeof(v)); }

// A batch handed from one thread to the next.
using Batch = std::unique_ptr<std::vector<std::string>>;

struct Mailbox {
	std::mutex mu;
	std::condition_variable cv;
	std::deque<Batch> q;
};

struct Result {
	std::uint64_t sum = 0xcbf29ce484222325ULL;
	std::size_t keys = 0, list = 0, received = 0, received_bytes = 0, misaligned = 0;
};

void work(int id, int nthreads, int rounds, std::vector<Mailbox> &boxes, Result &r)
{
	Mailbox &out = boxes[(id + 1) % nthreads];
	Mailbox &in = boxes[id];
	for (int round = 0; round < rounds; round++) {
		std::map<std::string, std::vector<std::uint64_t>> m;
		std::unordered_map<std::string, std::string> u;
		for (int i = 0; i < 300; i++) {
			std::string k = "key-" + std::to_string(id) + "-" + std::to_string(round) + "-" +
					std::to_string(i * 7919 % 300);
			std::vector<std::uint64_t> &v = m[k];
			for (int j = 0; j < (i % 37) + 1; j++)
				v.push_back(static_cast<std::uint64_t>(i) * 31 + static_cast<std::uint64_t>(j));
			std::string s(static_cast<std::size_t>(i % 50), static_cast<char>('a' + i % 26));
			for (int j = 0; j < i % 5; j++)
				s += s + "+";
			u.emplace(k, std::move(s));
		}
		for (const auto &kv : m) { // ordered: deterministic
			r.sum = fnv(r.sum, kv.first.data(), kv.first.size());
			for (std::uint64_t x : kv.second)
				r.sum = fnv(r.sum, x);
			const std::string &s = u.at(kv.first);
			r.sum = fnv(r.sum, s.data(), s.size());
		}
		r.keys += m.size();

		// A list of unique_ptr, torn down from the head (no deep recursion).
		std::unique_ptr<Node> head;
		for (int i = 0; i < 200; i++) {
			auto n = std::make_unique<Node>();
			n->name = "node" + std::to_string(i);
			n->next = std::move(head);
			head = std::move(n);
		}
		for (const Node *n = head.get(); n; n = n->next.get()) {
			r.sum = fnv(r.sum, n->name.data(), n->name.size());
			r.list++;
		}
		while (head)
			head = std::move(head->next);

		// Over-aligned objects: aligned new, new[], and a vector of them.
		auto one = std::make_unique<Cell>();
		std::unique_ptr<Cell[]> arr(new Cell[17 + round % 5]);
		std::vector<Cell> vec(33 + static_cast<std::size_t>(round));
		auto pg = std::make_unique<Page>();
		r.misaligned += reinterpret_cast<std::uintptr_t>(one.get()) % alignof(Cell) != 0;
		r.misaligned += reinterpret_cast<std::uintptr_t>(arr.get()) % alignof(Cell) != 0;
		r.misaligned += reinterpret_cast<std::uintptr_t>(vec.data()) % alignof(Cell) != 0;
		r.misaligned += reinterpret_cast<std::uintptr_t>(pg.get()) % alignof(Page) != 0;
		for (std::size_t i = 0; i < vec.size(); i++)
			for (int j = 0; j < 8; j++)
				vec[i].v[j] = i * 8 + static_cast<std::size_t>(j);
		for (const Cell &c : vec)
			r.sum = fnv(r.sum, c.v, sizeof(c.v));
		for (int j = 0; j < 8; j++)
			one->v[j] = static_cast<std::uint64_t>(j);
		r.sum = fnv(r.sum, one->v, sizeof(one->v));
		for (std::size_t i = 0; i < sizeof(pg->b); i++)
			pg->b[i] = static_cast<unsigned char>(i * 13);
		r.sum = fnv(r.sum, pg->b, sizeof(pg->b));

		// nothrow new and shared_ptr.
		int *nt = new (std::nothrow) int[1000];
		if (nt) {
			for (int i = 0; i < 1000; i++)
				nt[i] = i * round;
			r.sum = fnv(r.sum, nt, 1000 * sizeof(int));
			delete[] nt;
		}
		auto sp = std::make_shared<std::vector<std::string>>(50, std::string(100, 'x'));
		std::shared_ptr<std::vector<std::string>> sp2 = sp;
		r.sum = fnv(r.sum, sp2->size());

		// Hand a batch to the next thread; take the one from the previous.
		Batch b(new std::vector<std::string>);
		for (int i = 0; i < 64; i++)
			b->push_back(std::string(static_cast<std::size_t>(i * 11 + round),
						 static_cast<char>('A' + (id + i) % 26)));
		{
			std::lock_guard<std::mutex> g(out.mu);
			out.q.push_back(std::move(b));
		}
		out.cv.notify_one();
		Batch got;
		{
			std::unique_lock<std::mutex> g(in.mu);
			in.cv.wait(g, [&] { return !in.q.empty(); });
			got = std::move(in.q.front());
			in.q.pop_front();
		}
		for (const std::string &s : *got) {
			r.received_bytes += s.size();
			r.sum = fnv(r.sum, s.data(), s.size());
		}
		r.received++;
	}
}

} // namespace

int main(int argc, char **argv)
{
	int nthreads = argc > 1 ? std::atoi(argv[1]) : 4;
	int rounds = argc > 2 ? std::atoi(argv[2]) : 40;
	if (nthreads < 1 || rounds < 1)
		return 2;
	std::vector<Mailbox> boxes(static_cast<std::size_t>(nthreads));
	std::vector<Result> res(static_cast<std::size_t>(nthreads));
	std::vector<std::thread> th;
	for (int i = 0; i < nthreads; i++)
		th.emplace_back(work, i, nthreads, rounds, std::ref(boxes), std::ref(res[static_cast<std::size_t>(i)]));
	for (auto &t : th)
		t.join();
	std::uint64_t total = 0xcbf29ce484222325ULL;
	std::size_t misaligned = 0;
	for (int i = 0; i < nthreads; i++) {
		const Result &r = res[static_cast<std::size_t>(i)];
		std::printf("thread %d: %zu keys, %zu list nodes, %zu batches (%zu bytes) received, checksum %016llx\n",
			    i, r.keys, r.list, r.received, r.received_bytes, static_cast<unsigned long long>(r.sum));
		total = fnv(total, r.sum);
		misaligned += r.misaligned;
	}
	std::printf("total checksum %016llx, misaligned over-aligned objects: %zu\n",
		    static_cast<unsigned long long>(total), misaligned);
	return misaligned ? 1 : 0;
}
