# Ferry: `make test` is the README test command (scripts/test.sh).
.PHONY: test build vet fmt bench kafka-up kafka-down kafka-status

test:
	scripts/test.sh

build:
	mkdir -p bin
	go build -o bin/ ./cmd/...

vet:
	go vet ./...

fmt:
	gofmt -l -w .

# Benchmarks run against the Kafka of scripts/kafka.sh (started if needed, left running).
bench:
	FERRY_TEST_KAFKA=$$(scripts/kafka.sh up | tail -n1) && export FERRY_TEST_KAFKA && \
		go test -run '^$$' -bench . -benchmem $(or $(PKG),./...)

kafka-up:
	scripts/kafka.sh up

kafka-down:
	scripts/kafka.sh down

kafka-status:
	scripts/kafka.sh status
