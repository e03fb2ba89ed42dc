import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.LongAdder;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.errors.SerializationException;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * The benchmark's count topology on Kafka Streams: a running count per key in a persistent
 * RocksDB store with its changelog (logging on, caching off, so one output per input), the
 * input values parsed as JSON (Jackson, as Kafka's own JSON serdes do), as every system of the
 * benchmark parses them.
 *
 * <p>Args: bootstrap, application id, input topic, output topic, processing guarantee
 * (exactly_once_v2 | at_least_once), commit interval in ms, state dir, stream threads
 * (num.stream.threads: 1 per core in the whole-machine mode). Speaks the benchmark
 * child protocol on stdout: {@code FIRST <unix seconds>} when the first input record reaches
 * the topology, {@code STATS <json>} after a clean stop (SIGTERM).
 */
public final class CountBench {
    private static volatile boolean seen = false;

    static void first() {
        if (!seen) {
            seen = true;
            System.out.printf("FIRST %.6f%n", System.currentTimeMillis() / 1000.0);
            System.out.flush();
        }
    }

    /** JSON values as Jackson trees: what a Kafka Streams app reading JSON does per record. */
    static Serde<JsonNode> jsonSerde() {
        ObjectMapper mapper = new ObjectMapper();
        Serializer<JsonNode> serializer = (topic, node) -> {
            try {
                return node == null ? null : mapper.writeValueAsBytes(node);
            } catch (java.io.IOException e) {
                throw new SerializationException(e);
            }
        };
        Deserializer<JsonNode> deserializer = (topic, bytes) -> {
            try {
                return bytes == null ? null : mapper.readTree(bytes);
            } catch (java.io.IOException e) {
                throw new SerializationException(e);
            }
        };
        return Serdes.serdeFrom(serializer, deserializer);
    }

    public static void main(String[] args) throws InterruptedException {
        String bootstrap = args[0];
        String appId = args[1];
        String input = args[2];
        String output = args[3];
        String guarantee = args[4];
        long commitMs = Long.parseLong(args[5]);
        String stateDir = args[6];
        int threads = args.length > 7 ? Integer.parseInt(args[7]) : 1;

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, commitMs);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");

        LongAdder processed = new LongAdder(); // no shared cache line between stream threads
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), jsonSerde()))
            .peek((key, value) -> {
                first();
                processed.increment();
            })
            .groupByKey()
            .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts")
                .withKeySerde(Serdes.String())
                .withValueSerde(Serdes.Long())
                .withCachingDisabled()
                .withLoggingEnabled(Map.of()))
            .toStream()
            .mapValues(count -> Long.toString(count))
            .to(output, Produced.with(Serdes.String(), Serdes.String()));

        runUntilStopped(builder.build(), props, processed);
    }

    /**
     * Runs {@code topology} until SIGTERM, then prints {@code STATS} with the records the
     * topology counted in {@code processed} (the child protocol; JoinBench runs the same way).
     */
    static void runUntilStopped(Topology topology, Properties props, LongAdder processed)
            throws InterruptedException {
        KafkaStreams streams = new KafkaStreams(topology, props);
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(60));
            System.out.printf("STATS {\"records_processed\": %d}%n", processed.sum());
            System.out.flush();
            stopped.countDown();
        }));
        streams.setUncaughtExceptionHandler(exc -> {
            exc.printStackTrace();
            return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();
        stopped.await();
    }
}
