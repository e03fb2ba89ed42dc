import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * The benchmark's count topology on Kafka Streams: a running count per key in a persistent
 * RocksDB store with its changelog (logging on, caching off, so one output per input), one
 * stream thread.
 *
 * <p>Args: bootstrap, application id, input topic, output topic, processing guarantee
 * (exactly_once_v2 | at_least_once), commit interval in ms, state dir. Speaks the benchmark
 * child protocol on stdout: {@code FIRST <unix seconds>} when the first input record reaches
 * the topology, {@code STATS <json>} after a clean stop (SIGTERM).
 */
public final class CountBench {
    private static volatile boolean seen = false;

    private static void first() {
        if (!seen) {
            seen = true;
            System.out.printf("FIRST %.6f%n", System.currentTimeMillis() / 1000.0);
            System.out.flush();
        }
    }

    public static void main(String[] args) throws InterruptedException {
        String bootstrap = args[0];
        String appId = args[1];
        String input = args[2];
        String output = args[3];
        String guarantee = args[4];
        long commitMs = Long.parseLong(args[5]);
        String stateDir = args[6];

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, commitMs);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");

        AtomicLong processed = new AtomicLong();
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(input, Consumed.with(Serdes.String(), Serdes.ByteArray()))
            .peek((key, value) -> {
                first();
                processed.incrementAndGet();
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

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(60));
            System.out.printf("STATS {\"records_processed\": %d}%n", processed.get());
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
