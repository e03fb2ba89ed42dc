import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.atomic.LongAdder;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.kstream.ValueJoiner;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * The benchmark's join rows on Kafka Streams (benchmarks/join_bench.py has the streams_app side
 * and says what both do): the count's input joined with the users' topic, either as a table
 * built from it ({@code stream-table}: source topic as its changelog, topology.optimization=all;
 * caching off) or as a stream within an hour either side ({@code stream-stream}: inner, no
 * grace, the default logged window stores). Each input gives one output {@code "<seq>:<tier>"}.
 *
 * <p>Args: CountBench's (bootstrap, application id, input topic, output topic, processing
 * guarantee, commit interval in ms, state dir, stream threads), then the join kind and the
 * users' topic. The same child protocol on stdout ({@code FIRST}, {@code STATS}).
 */
public final class JoinBench {
    public static void main(String[] args) throws InterruptedException {
        String bootstrap = args[0];
        String appId = args[1];
        String input = args[2];
        String output = args[3];
        String guarantee = args[4];
        long commitMs = Long.parseLong(args[5]);
        String stateDir = args[6];
        int threads = Integer.parseInt(args[7]);
        String kind = args[8];
        String users = args[9];

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, commitMs);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.TOPOLOGY_OPTIMIZATION_CONFIG, StreamsConfig.OPTIMIZE);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");

        Serde<JsonNode> json = CountBench.jsonSerde();
        LongAdder processed = new LongAdder();
        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, JsonNode> events = builder.stream(input, Consumed.with(Serdes.String(), json))
            .peek((key, value) -> {
                CountBench.first();
                processed.increment();
            });
        ValueJoiner<JsonNode, JsonNode, String> joiner =
            (event, user) -> event.get("seq").asLong() + ":" + user.get("tier").asText();
        KStream<String, String> joined;
        if (kind.equals("stream-table")) {
            KTable<String, JsonNode> table = builder.table(
                users,
                Consumed.with(Serdes.String(), json),
                Materialized.<String, JsonNode, KeyValueStore<Bytes, byte[]>>as("join-users-table")
                    .withKeySerde(Serdes.String())
                    .withValueSerde(json)
                    .withCachingDisabled());
            joined = events.join(table, joiner);
        } else if (kind.equals("stream-stream")) {
            KStream<String, JsonNode> others = builder.stream(users, Consumed.with(Serdes.String(), json));
            joined = events.join(
                others,
                joiner,
                JoinWindows.ofTimeDifferenceWithNoGrace(Duration.ofHours(1)),
                StreamJoined.with(Serdes.String(), json, json));
        } else {
            throw new IllegalArgumentException("join kind: " + kind);
        }
        joined.to(output, Produced.with(Serdes.String(), Serdes.String()));

        CountBench.runUntilStopped(builder.build(props), props, processed);
    }
}
